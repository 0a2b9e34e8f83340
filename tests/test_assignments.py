"""plume-analyze's per-trace tables: ``assignments.csv`` says where each trace landed,
``contingency.csv`` is the kinds x clusters table it prints (only when there are kinds)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra.core.global_hydra import GlobalHydra

from plume.analysis import analyze, assignment_table, contingency_table
from plume.harness.config.preflight import check_analyze
from plume.traces import load_tracebench
from tests.conftest import TINY, compose_config

CACHE = next(o for o in TINY if o.startswith("paths.cache="))  # shared: analysed once
MAJORITY_FAST_KINDS = {"fast_high-var": 375, "fast_low-var": 375,
                       "slow_high-var": 125, "slow_low-var": 125}


@pytest.fixture(scope="module")
def majority_fast(tmp_path_factory):
    """The ``plume-analyze env.dataset=majority_fast`` command, run once: (its folder, what it
    printed, the analysis it wrote out)."""
    from plume.harness.apps import analyze as command

    root = tmp_path_factory.mktemp("analyze")
    argv = ["plume-analyze", "env.dataset=majority_fast", f"paths.root={root}", CACHE]
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.chdir(root)
        patch.setattr(sys, "argv", argv)
        GlobalHydra.instance().clear()
        command.main()
    GlobalHydra.instance().clear()
    _, _, settings, traces = check_analyze(compose_config("analyze", *argv[1:]))
    result = analyze(traces, settings, cache_dir=CACHE.split("=", 1)[1])  # from the cache
    out = root / "analysis" / "tracebench-majority_fast-train"
    return out, printed.getvalue(), result


def _assignments(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "assignments.csv", dtype={"trace_id": str, "label": str})


def test_every_trace_once_in_order_with_its_cluster_and_kind(majority_fast):
    out, _, result = majority_fast
    table = _assignments(out)
    traces = load_tracebench("majority_fast", "train")
    assert list(table.columns) == ["trace_id", "cluster", "p_0", "p_1", "p_2", "p_3", "label"]
    assert table["trace_id"].tolist() == traces.trace_ids.tolist()  # each once, in order
    assert table["label"].tolist() == traces.labels.tolist()
    assert table["cluster"].dtype == np.int64
    sizes = np.bincount(table["cluster"], minlength=result.k)
    assert sizes.tolist() == result.cluster_sizes.tolist()
    assert sizes.tolist() == json.loads((out / "analysis.json").read_text())["cluster_sizes"]
    assert sorted(sizes.tolist()) == [125, 125, 375, 375]


def test_the_probabilities_are_the_memberships_and_the_cluster_their_argmax(majority_fast):
    out, _, result = majority_fast
    table = _assignments(out)
    p = table[[f"p_{j}" for j in range(result.k)]].to_numpy()
    assert ((p >= 0) & (p <= 1)).all() and np.abs(p.sum(axis=1) - 1).max() <= 1e-9
    np.testing.assert_allclose(p, result.memberships, rtol=0, atol=1e-12)
    # the pipeline's hard label is the argmax of the GMM posteriors (fit_gmm)
    assert (table["cluster"] == p.argmax(axis=1)).all()
    assert (table["cluster"] == result.labels).all()


def test_contingency_csv_is_the_crosstab_of_the_assignments_and_the_printed_table(
        majority_fast):
    out, printed, result = majority_fast
    table = _assignments(out)
    written = pd.read_csv(out / "contingency.csv", index_col="kind")
    recomputed = pd.crosstab(table["label"], table["cluster"], margins=True,
                             margins_name="total")
    recomputed.columns = recomputed.columns.astype(str)
    assert written.to_numpy().tolist() == recomputed.to_numpy().tolist()
    assert written.index.tolist() == recomputed.index.tolist()
    assert written.columns.tolist() == recomputed.columns.tolist()
    assert written["total"].drop("total").to_dict() == MAJORITY_FAST_KINDS
    kinds = written.drop(index="total", columns="total")
    assert ((kinds > 0).sum(axis=1) == 1).all()  # each kind in one cluster: ARI 1
    for row in contingency_table(result).to_string().splitlines():
        assert "  " + row in printed


def test_the_command_names_both_files_in_its_summary_and_analysis_json(majority_fast):
    out, printed, _ = majority_fast
    assert (f"cluster of each trace: {out / 'assignments.csv'}; "
            f"contingency table: {out / 'contingency.csv'}") in printed
    files = json.loads((out / "analysis.json").read_text())["files"]
    assert files == {"figure": "clusters.png", "assignments": "assignments.csv",
                     "contingency": "contingency.csv"}
    assert all((out / name).is_file() for name in files.values())


def test_soft_memberships_are_written_as_they_are(majority_fast):
    _, _, result = majority_fast
    rng = np.random.default_rng(0)
    soft = rng.dirichlet(np.ones(result.k), size=len(result.labels))
    table = assignment_table(dataclasses.replace(result, memberships=soft,
                                                 labels=soft.argmax(axis=1)))
    np.testing.assert_array_equal(table.filter(like="p_").to_numpy(), soft)
    assert (table["cluster"] == soft.argmax(axis=1)).all()


def test_a_dataset_without_kinds_gets_no_label_column_and_no_contingency(
        compose_cfg_analyze, tmp_path):
    from plume.harness.apps.analyze import report

    traces = load_tracebench("majority_fast", "train")
    order = np.random.default_rng(1).permutation(len(traces))
    folder = tmp_path / "mine"
    for split, idx in (("train", order[:80]), ("test", order[80:90])):
        dataclasses.replace(traces.subset(idx, name=split), labels=None).save(
            folder / f"{split}.npz")
    out = tmp_path / "out"
    out.mkdir()
    (out / "contingency.csv").write_text("stale\n")  # from an earlier, labelled version
    text = report(compose_cfg_analyze(
        f"env.dataset={folder}", "env.trace_format=npz", f"paths.root={tmp_path}",
        f"paths.cache={tmp_path / 'cache'}", "analysis.select=false",
        "analysis.k_range=[2,3]", "analysis.restarts=3"), out)
    table = _assignments(out)
    k = json.loads((out / "analysis.json").read_text())["k"]
    assert list(table.columns) == ["trace_id", "cluster", *[f"p_{j}" for j in range(k)]]
    assert table["trace_id"].tolist() == traces.trace_ids[order[:80]].tolist()
    assert not (out / "contingency.csv").exists()
    assert f"cluster of each trace: {out / 'assignments.csv'}\n" in text + "\n"
    assert "contingency" not in text
    assert json.loads((out / "analysis.json").read_text())["files"] == {
        "figure": "clusters.png", "assignments": "assignments.csv"}
