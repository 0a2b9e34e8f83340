"""Which tasks a report compares algorithms on, and which it sets aside.

rliable's statistics treat tasks as separate problems (strata). A test set often is not one:
TraceBench's three test sets are mixtures of the same four kinds of traces, so counting them
as three tasks counts one slow kind three times, and the fast kinds, on which every sampler
scores the ceiling, pad every aggregate. The rule, per environment and training dataset:

* a task is a **ground-truth kind** when every test trace has one; the kind's traces from all
  test sets are pooled (the same kind in two test sets is the same generator, not a second
  task);
* otherwise a **cluster** (the training-set cluster a run recorded for each test trace),
  pooled across test sets the same way;
* otherwise a **test set**.

A task on which every run of every algorithm scores the same (within ``SATURATION_TOL`` on the
normalised scale) is **saturated**: it cannot tell algorithms apart, so it is listed and left
out of the comparisons (kept when every task is saturated, with a note).
"""

from __future__ import annotations

import pandas as pd

#: Spread (normalised score) below which a task counts as saturated.
SATURATION_TOL = 1e-3
UNIT_NAMES = {"label": "ground-truth kind", "cluster": "cluster", "test_set": "test set"}

RULE_TEXT = (
    "A task is a ground-truth kind of trace when every test trace has one, else a training "
    "cluster when the runs recorded one for every test trace, else a test set; a kind's (or "
    "cluster's) traces from all test sets are pooled into one task, because the same kind in "
    "two test sets is the same kind of trace, not a second task. A task on which every run "
    f"of every algorithm scores within {SATURATION_TOL:g} of the same value is saturated: it "
    "cannot separate algorithms and is left out of the aggregates, comparisons, profiles and "
    "curves (still shown in the per-task tables).")


def prefixes(frame: pd.DataFrame) -> pd.Series:
    """Per row, what tells tasks of different runs apart when the report pools several
    environments ("cc:") or training datasets ("balanced->"); empty otherwise."""
    env = frame["env"].astype("string").fillna("?")
    dataset = frame["dataset"].astype("string").fillna("?")
    prefix = pd.Series("", index=frame.index, dtype="string")
    if dataset.nunique() > 1:
        prefix = dataset + "->"
    if env.nunique() > 1:
        prefix = env + ":" + prefix
    return prefix.astype(str)


def task_unit(rows: pd.DataFrame) -> str:
    """'label', 'cluster' or 'test_set': the finest grouping every row of ``rows`` has."""
    for unit in ("label", "cluster"):
        if rows[unit].notna().all():
            return unit
    return "test_set"


def assign_tasks(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``task`` (its name) and ``task_unit`` for every row, the unit chosen per
    (environment, training dataset)."""
    keys = [frame["env"].astype("string").fillna("?"),
            frame["dataset"].astype("string").fillna("?")]
    units = frame.groupby(keys, sort=False, dropna=False).apply(task_unit, include_groups=False)
    unit = pd.Series([units[k] for k in zip(*keys)], index=frame.index, dtype=str)
    value = frame["test_set"].astype(str).where(unit == "test_set", "")
    value = value.where(unit != "label", frame["label"].astype(str))
    value = value.where(unit != "cluster", "cluster " + frame["cluster"].astype(str))
    return frame.assign(task=prefixes(frame) + value, task_unit=unit)


def task_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per task: task, env, dataset, unit and the test sets its traces come from."""
    rows = []
    for task, group in frame.groupby("task", sort=True):
        rows.append({"task": task, "env": str(group["env"].iloc[0]),
                     "dataset": str(group["dataset"].iloc[0]),
                     "unit": UNIT_NAMES[group["task_unit"].iloc[0]],
                     "test_sets": ", ".join(sorted(group["test_set"].astype(str).unique()))})
    return pd.DataFrame(rows, columns=["task", "env", "dataset", "unit", "test_sets"])


def complete_cells(per_cell: pd.DataFrame, frame: pd.DataFrame) -> pd.Series:
    """Mask of the (run, task, ...) rows of ``per_cell`` whose ``n_test_sets`` covers every
    test set the task's traces come from: a run that lacks one of them would score the task
    on other traces than its peers."""
    expected = frame.groupby("task")["test_set"].nunique()
    return per_cell["n_test_sets"].to_numpy() == per_cell["task"].map(expected).to_numpy()


def saturated_tasks(scores: pd.DataFrame, tasks: list[str]) -> dict[str, float]:
    """{task: its common score} for the tasks where every row of ``scores`` (one per run and
    task) lies within SATURATION_TOL of the others."""
    out = {}
    for task in tasks:
        values = scores.loc[scores["task"] == task, "score"]
        if len(values) and values.max() - values.min() <= SATURATION_TOL:
            out[task] = float(values.mean())
    return out


def composition(frame: pd.DataFrame, grouping: str, member: str) -> dict[str, str]:
    """{group: 'slow_high-var 62 %, slow_low-var 38 %'}: what the traces of each ``grouping``
    value (a cluster, a test set) are made of by ``member`` (their kinds), counted over the
    distinct test traces; {} when ``member`` is not recorded."""
    if member not in frame or frame[member].isna().all():
        return {}
    traces = frame.dropna(subset=[grouping, member]).drop_duplicates(
        ["env", "dataset", "test_set", "trace", grouping, member])
    out = {}
    for group, rows in traces.groupby(traces[grouping].astype(str)):
        shares = rows[member].astype(str).value_counts(normalize=True)
        shares = shares.sort_index().sort_values(ascending=False, kind="stable")
        label = "cluster {}" if member == "cluster" else "{}"
        out[str(group)] = ", ".join(f"{label.format(name)} {share:.0%}"
                                    for name, share in shares.items())
    return out


__all__ = ["RULE_TEXT", "SATURATION_TOL", "UNIT_NAMES", "assign_tasks", "complete_cells",
           "composition", "prefixes", "saturated_tasks", "task_table", "task_unit"]
