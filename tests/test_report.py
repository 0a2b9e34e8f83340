"""The report layer: scan run directories, pool them with rliable, write report.md/tables/figures.

Most tests use SYNTHETIC run directories with the real file layout (status.json, config.yaml,
.hydra/overrides.yaml, eval.parquet columns of plume-train) and a planted effect; one test
runs real tiny jobs through ``plume.harness.apps.train.run_job`` to prove the real files parse.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as sps

from plume.report import build_report, load_scores, scan_runs
from plume.report.cli import main
from plume.report.inference import MEASURED_COVERAGE, holm
from plume.report.runs import RunScanError
from plume.report.stats import (
    Normalisation,
    ReportStatsError,
    SeedMismatchError,
    aggregate_metrics,
    analyse,
    builtin_normalisation,
    interval_estimates,
    iqm,
    normalisation_texts,
    normalise,
)

TRACEBENCH = builtin_normalisation("tracebench")  # the fixed anchors TraceBench's spec declares

LABELS = ["fast_low-var", "fast_high-var", "slow_low-var", "slow_high-var"]
TEST_SETS = ("majority_fast", "majority_slow")
SHIFTS = {"uniform": 0.0, "plume_static": 0.15, "plume_dynamic": 1.0}  # plume_dynamic planted
SEEDS = range(5)
REPS = 200


def write_run(root: Path, sampler: str, seed: int, *, shift: float | None = None,
              state: str = "completed", error: str | None = None,
              test_sets=TEST_SETS, n_traces: int = 40, progress=(0.0, 0.5, 1.0),
              exp: str = "synthetic", qoe: float | None = None,
              fixed: dict[str, float] | None = None, clusters: bool = False,
              labelled: bool = True) -> Path:
    """A run directory as plume-train writes it, with per-chunk QoE
    2 + 2 * progress + shift + seed effect + trace effect (or exactly ``qoe``, or
    ``fixed[kind]`` for the traces of that kind). ``clusters`` records cluster = kind index;
    ``labelled=False`` records no kinds."""
    shift = SHIFTS.get(sampler, 0.0) if shift is None else shift
    key = f"env.n_envs=8,env.test_sets=[{','.join(test_sets)}],sampler={sampler}"
    run = root / exp / key / f"seed={seed}"
    (run / ".hydra").mkdir(parents=True, exist_ok=True)
    config = {
        "env": {"name": "tracebench", "dataset": "majority_fast", "n_envs": 8,
                "test_sets": list(test_sets), "quality_weight": 1.0, "rebuf_weight": 6.0},
        "algo": {"name": "ppo"}, "sampler": {"name": sampler},
        "analysis": {"method": "gmm"}, "exp_name": exp, "seed": seed,
        "train": {"total_steps": 4096, "eval_points": len(progress) - 1},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    (run / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump([f"sampler={sampler}", f"seed={seed}"]))
    status = {"state": state, "error": error, "elapsed_s": 1.5, "exp_name": exp, "seed": seed,
              "choices": {"env": "tracebench", "algo": "ppo", "sampler": sampler,
                          "analysis": "plume"}}
    (run / "status.json").write_text(json.dumps(status))
    rng = np.random.default_rng([seed, len(sampler), int(1000 * shift) % 997])
    seed_effect = rng.normal(0, 0.08)
    rows = []
    for p in progress:
        for test_set in test_sets:
            trace_effect = np.random.default_rng(len(test_set)).normal(0, 0.5, n_traces)
            for trace in range(n_traces):
                kind = LABELS[trace % 4]
                value = (qoe if qoe is not None else
                         2.0 + 2.0 * p + shift + seed_effect + trace_effect[trace]
                         + rng.normal(0, 0.05))
                value = (fixed or {}).get(kind, value)
                length = 99.0
                rows.append({
                    "test_set": test_set, "trace": trace,
                    "trace_id": f"{test_set}/test/{trace:04d}",
                    "label": kind if labelled else None,
                    "cluster": (trace % 4) if clusters else None,
                    "return": value * length, "return_transformed": value,
                    "quality": value * length, "stall": 0.0, "length": length,
                    "progress": p, "env_steps": int(4096 * p),
                })
    pd.DataFrame(rows).to_parquet(run / "eval.parquet", index=False)
    return run


def synthetic_sweep(root: Path) -> Path:
    """3 samplers x 5 seeds x 2 test sets x 40 traces x 3 progress points; plus a failed
    plume_dynamic run with absurd scores and an unfinished uniform run (never pooled)."""
    for sampler in SHIFTS:
        for seed in SEEDS:
            write_run(root, sampler, seed)
    write_run(root, "plume_dynamic", 5, shift=100.0, state="failed",
              error="RuntimeError: boom in the learner")
    write_run(root, "uniform", 6, state="running")
    return root / "synthetic"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    return synthetic_sweep(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def cli_report(sweep, tmp_path_factory):
    """The report the command line writes for the synthetic sweep."""
    out = tmp_path_factory.mktemp("report")
    code = main([str(sweep), "--out", str(out), "--reps", str(REPS), "--seed", "3"])
    assert code == 0
    return out


# --------------------------------------------------------------------------- normalisation, IQM


def test_normalisation_arithmetic_by_hand(tmp_path):
    assert TRACEBENCH.floor == 1.0 and TRACEBENCH.ceiling == 6.0
    assert TRACEBENCH(3.5) == pytest.approx((3.5 - 1) / 5) == pytest.approx(0.5)
    assert TRACEBENCH(1.0) == 0.0 and TRACEBENCH(6.0) == 1.0
    assert "lowest bitrate" in TRACEBENCH.text("tracebench")
    write_run(tmp_path, "uniform", 0, qoe=3.5, n_traces=4, test_sets=("majority_slow",))
    scores = load_scores(scan_runs(tmp_path))
    assert np.allclose(scores["score"], 3.5)  # per-chunk QoE = return / length
    assert np.allclose(normalise(scores)["score"], 0.5)
    with pytest.raises(ValueError, match="ceiling"):
        Normalisation(2.0, 1.0, "upside down")
    with pytest.raises(ReportStatsError, match="runs of environment .cc. record no normalisation"):
        normalise(scores.assign(env="cc"))


def test_recorded_anchors_normalise_each_test_set_by_hand(tmp_path):
    """A run's score.json anchors (here: floor 10 / ceiling 20 on one set, 0 / 4 on the other)
    normalise its rows per test set, and the report states them."""
    run = write_run(tmp_path, "uniform", 0, qoe=15.0, n_traces=2, test_sets=("a", "b"))
    (Path(run) / "score.json").write_text(json.dumps({
        "score": {"name": "qoe_per_chunk", "unit": "QoE per chunk"},
        "normalisation": {"description": "floor = X, ceiling = Y.",
                          "test_sets": {"a": {"floor": 10.0, "ceiling": 20.0},
                                        "b": {"floor": 0.0, "ceiling": 4.0}}}}))
    scores = load_scores(scan_runs(tmp_path))
    normalised = normalise(scores)
    assert set(normalised.loc[normalised["test_set"] == "a", "score"]) == {0.5}
    assert set(normalised.loc[normalised["test_set"] == "b", "score"]) == {3.75}
    text = normalisation_texts(normalised, {})["tracebench"].text("tracebench")
    assert "a: floor 10, ceiling 20" in text and "b: floor 0, ceiling 4" in text
    assert "floor = X, ceiling = Y." in text


def test_iqm_is_the_25_percent_trimmed_mean():
    matrix = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 100.0]])
    expected = sps.trim_mean(matrix, 0.25, axis=None)
    assert expected == pytest.approx(4.5)  # drops 1, 2 and 7, 100
    assert iqm(matrix) == pytest.approx(expected)
    assert aggregate_metrics(matrix)[0] == pytest.approx(expected)
    points, _ = interval_estimates({"x": matrix}, aggregate_metrics, reps=50, seed=0)
    assert points["x"][0] == pytest.approx(expected)


def test_bootstrap_is_seeded_and_leaves_the_global_rng_alone():
    matrix = np.random.default_rng(0).normal(size=(5, 2))
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a = interval_estimates({"x": matrix}, aggregate_metrics, reps=100, seed=7)[1]["x"]
    b = interval_estimates({"x": matrix}, aggregate_metrics, reps=100, seed=7)[1]["x"]
    c = interval_estimates({"x": matrix}, aggregate_metrics, reps=100, seed=8)[1]["x"]
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.array_equal(np.random.get_state()[1], before)


# --------------------------------------------------------------------------- synthetic sweep


def test_inventory_lists_every_run_and_scores_come_from_completed_runs_only(sweep):
    inventory = scan_runs([sweep])
    assert len(inventory) == 17
    assert inventory.counts() == {"completed": 15, "failed": 1, "running": 1}
    failed = inventory.excluded.set_index("state").loc["failed"]
    assert failed["error"] == "RuntimeError: boom in the learner"
    assert failed["config_key"].endswith("sampler=plume_dynamic")
    row = inventory.completed.iloc[0]
    assert (row["env"], row["dataset"], row["algo"], row["analysis"]) == (
        "tracebench", "majority_fast", "ppo", "plume")
    scores = load_scores(inventory)
    assert set(scores["seed"]) == set(SEEDS)
    assert len(scores) == 15 * 3 * 2 * 40
    assert scores["cluster"].isna().all() and scores["label"].notna().all()
    assert scores["score"].max() < 10  # the failed run's absurd scores are not there


def test_report_ranks_the_planted_sampler_first_with_a_verdict_and_its_effect_sizes(cli_report):
    aggregates = pd.read_csv(cli_report / "tables" / "aggregates.csv")
    assert aggregates["algorithm"].tolist()[0] == "plume_dynamic"
    assert (aggregates["n_runs"] == 5).all()  # the failed/unfinished runs are not pooled
    poi = pd.read_csv(cli_report / "tables" / "probability_of_improvement.csv")
    pooled = poi[(poi["algorithm"] == "plume_dynamic") & (poi["scope"] == "all tasks")].iloc[0]
    assert pooled["verdict"] == "better" and pooled["p_holm"] < 0.05
    assert 0.15 < pooled["diff_lo"] < pooled["diff"] < pooled["diff_hi"] < 0.25  # 1.0 / 5
    assert pooled["poi"] == 1.0 and pooled["poi_degenerate"]  # 5 vs 5, fully separated
    assert set(poi["scope"]) == {"all tasks", *LABELS}  # the kinds, pooled over test sets
    text = (cli_report / "report.md").read_text()
    assert re.search(r"plume_dynamic beats uniform on all tasks: difference of means "
                     r"\+0\.\d{3} \[\+0\.\d{3}, \+0\.\d{3}\] \(normalised score, 95 % paired t\), "
                     r"Holm-adjusted p = \S+ over 10 verdicts; paired by seed \(5 pairs: the same "
                     r"seeds on both sides\): seed-level correlation -?\d\.\d\d, [^\n]*; "
                     r"PoI 1\.00 \[1\.00, 1\.00\] "
                     r"\(degenerate: every run beats every baseline run", text)
    assert re.search(r"plume_dynamic beats uniform on all tasks: [^\n]*; power at the observed "
                     r"difference 1\.00 \(two-sided paired t at 0\.05/10 = 0\.005, conservative: "
                     r"Bonferroni level\), 5 seeds per side for 80% \(Welch's test: 5\)\.\n", text)
    assert "plume_dynamic beats uniform on slow_high-var" in text


def test_failed_run_is_listed_in_the_report_and_left_out_of_the_numbers(sweep, cli_report):
    text = (cli_report / "report.md").read_text()
    listed = text.split("## Failed and unfinished runs")[1].split("##")[0]
    assert "RuntimeError: boom in the learner" in listed and "seed=5" in listed
    assert "running" in listed and "seed=6" in listed
    # plume_dynamic's pooled mean = the mean over its 5 completed runs of (trace means)
    scores = normalise(load_scores(scan_runs(sweep)))
    final = scores[(scores["sampler"] == "plume_dynamic") & (scores["progress"] == 1.0)]
    per_run_task = final.groupby(["seed", "label"])["score"].mean()  # a kind, both test sets
    aggregates = pd.read_csv(cli_report / "tables" / "aggregates.csv").set_index("algorithm")
    assert aggregates.loc["plume_dynamic", "mean"] == pytest.approx(per_run_task.mean())
    assert aggregates.loc["plume_dynamic", "IQM"] == pytest.approx(
        sps.trim_mean(per_run_task.to_numpy(), 0.25))


def test_cli_writes_report_tables_and_non_empty_figures(cli_report, capsys):
    assert (cli_report / "report.md").stat().st_size > 0
    for name in ("aggregates", "probability_of_improvement", "cells", "sample_efficiency",
                 "breakdowns", "task_scores", "runs"):
        for suffix in (".csv", ".md", ".tex"):
            assert (cli_report / "tables" / f"{name}{suffix}").stat().st_size > 0, name
    tex = (cli_report / "tables" / "aggregates.tex").read_text()
    assert "\\toprule" in tex and "plume\\_dynamic" in tex
    figures = sorted((cli_report / "figures").iterdir())
    stems = {p.stem for p in figures}
    assert stems == {"interval_estimates", "probability_of_improvement",
                     "performance_profiles", "sample_efficiency", "per_kind"}  # no clusters
    for stem in stems:
        for suffix in (".png", ".pdf"):
            assert (cli_report / "figures" / f"{stem}{suffix}").stat().st_size > 1000
    text = (cli_report / "report.md").read_text()
    assert "(figures/interval_estimates.png)" in text and "n = 5 runs per sampler" in text
    assert "normalised score = (QoE per chunk - 1) / (6 - 1)" in text
    assert "| plume_dynamic | fast_high-var | 5 | 5 | 0 1 2 3 4 |" in text  # runs per cell


def test_two_reports_give_bit_identical_tables(sweep, tmp_path):
    first = build_report([sweep], tmp_path / "a", reps=REPS, seed=1, figures=False)
    second = build_report([sweep], tmp_path / "b", reps=REPS, seed=1, figures=False)
    files = sorted(p.relative_to(first.out) for p in first.out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second.out) for p in second.out.rglob("*")
                           if p.is_file())
    assert any(p.suffix == ".csv" for p in files) and Path("report.md") in files
    for rel in files:
        assert (first.out / rel).read_bytes() == (second.out / rel).read_bytes(), rel
    assert first.ranking[0] == "plume_dynamic"
    assert first.answers == second.answers


def _sweep_with_holes(root: Path) -> Path:
    """plume_static seed 4 never ran; uniform seed 3's run lacks the majority_slow test set."""
    for sampler in SHIFTS:
        for seed in SEEDS:
            if (sampler, seed) == ("plume_static", 4):
                continue
            sets = ("majority_fast",) if (sampler, seed) == ("uniform", 3) else TEST_SETS
            write_run(root, sampler, seed, test_sets=sets, n_traces=8)
    return root


def test_missing_seeds_are_refused_naming_each_cell(tmp_path):
    scores = load_scores(scan_runs(_sweep_with_holes(tmp_path)))
    with pytest.raises(SeedMismatchError) as err:
        analyse(scores, seeds="refuse", reps=50)
    message = str(err.value)
    for kind in LABELS:
        assert f"(plume_static, {kind}) lacks seed(s) 4" in message
        # a kind's task pools both test sets: a run without one of them cannot score it
        assert f"(uniform, {kind}) lacks seed(s) 3" in message
    assert "(plume_dynamic," not in message


def test_missing_seeds_are_trimmed_with_a_note(tmp_path):
    root = _sweep_with_holes(tmp_path)
    inventory = scan_runs(root)
    analysis = analyse(load_scores(inventory), seeds="trim", reps=50, inventory=inventory.runs)
    assert analysis.seeds == [0, 1, 2]
    assert all(m.shape == (3, 4) for m in analysis.matrices.values())
    notes = "\n".join(analysis.notes)
    assert "Seed 3 dropped (trim): (uniform, fast_high-var) lacks seed(s) 3 (its completed run " \
           "lacks (some of) the test traces of this task)" in notes
    assert "Seed 4 dropped (trim): (plume_static, fast_high-var) lacks seed(s) 4 (no run " \
           "directory)" in notes
    cells = analysis.cells.set_index(["algorithm", "task"])
    assert cells.loc[("uniform", "fast_high-var"), "runs_found"] == 4  # seed 3 is partial
    assert cells.loc[("uniform", "fast_high-var"), "runs_used"] == 3


def test_a_trimmed_seed_of_a_failed_run_says_it_failed(tmp_path):
    for sampler in ("uniform", "plume_dynamic"):
        for seed in range(3):
            failed = (sampler, seed) == ("plume_dynamic", 2)
            write_run(tmp_path, sampler, seed, n_traces=4, test_sets=("majority_slow",),
                      state="failed" if failed else "completed",
                      error="ValueError: bad trace" if failed else None)
    inventory = scan_runs(tmp_path)
    analysis = analyse(load_scores(inventory), reps=50, inventory=inventory.runs)
    assert analysis.seeds == [0, 1]
    assert "lacks seed(s) 2 (run failed: ValueError: bad trace)" in "\n".join(analysis.notes)


def test_clear_errors(tmp_path, sweep, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunScanError, match="no run directories found under"):
        scan_runs(tmp_path / "empty")
    with pytest.raises(RunScanError, match="no such file"):
        scan_runs(tmp_path / "nowhere")
    write_run(tmp_path / "bad", "uniform", 0, state="failed", error="OSError: disk", n_traces=2)
    with pytest.raises(ReportStatsError, match="(?s)no completed runs.*OSError: disk"):
        build_report([tmp_path / "bad"], tmp_path / "out", figures=False)
    with pytest.raises(ReportStatsError, match="baseline 'random' is not among.*present: "
                                               "plume_dynamic, plume_static, uniform"):
        build_report([sweep], tmp_path / "out", baseline="random", reps=50, figures=False)
    assert main([str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "plume-report: error: no run directories found" in capsys.readouterr().err


def test_configs_sharing_a_sampler_must_be_grouped_apart(tmp_path):
    for seed in range(2):
        write_run(tmp_path, "uniform", seed, n_traces=4, test_sets=("majority_slow",))
        write_run(tmp_path, "uniform", seed, n_traces=4, test_sets=("majority_slow",),
                  exp="other")
    scores = load_scores(scan_runs(tmp_path))
    with pytest.raises(ReportStatsError, match="group_by='config_key'"):
        analyse(scores, reps=50)
    # same config_key in two experiments: group by exp_name instead
    analysis = analyse(scores, group_by="exp_name", baseline="other", reps=50)
    assert sorted(analysis.algorithms) == ["other", "synthetic"]
    assert analysis.poi["scope"].tolist() == ["all tasks", *sorted(LABELS)]
    assert (analysis.poi["verdict"] == "too few runs").all()  # 2 runs per side


def test_with_config_key_groups_the_baseline_may_be_named_by_its_run_folder(tmp_path):
    """Fig. 3's Random and Random+PER share the sampler: the baseline is named by the run
    folder (what ``plume-report --baseline`` accepts), whatever short name the report gives."""
    for seed in range(2):
        run = write_run(tmp_path, "uniform", seed, n_traces=4, test_sets=("majority_slow",),
                        shift=0.5)
        per = run.parent.with_name("algo.per=true," + run.parent.name)
        per.mkdir(exist_ok=True)
        run.rename(per / run.name)
        write_run(tmp_path, "uniform", seed, n_traces=4, test_sets=("majority_slow",))
    folder = next(tmp_path.glob("synthetic/algo.per=true,*")).name
    scores = load_scores(scan_runs(tmp_path))
    analysis = analyse(scores, group_by="config_key", baseline=folder, reps=50)
    assert analysis.baseline == "algo.per=true"  # the shared overrides are left out
    with pytest.raises(ReportStatsError, match="baseline 'nope' is not among"):
        analyse(scores, group_by="config_key", baseline="nope", reps=50)


# --------------------------------------------------------------------------- real tiny runs


def test_end_to_end_on_real_tiny_runs(compose_cfg, tmp_path):
    from plume.harness.apps.train import run_job
    from tests.conftest import TINY

    root = tmp_path / "runs" / "tiny"
    for sampler in ("uniform", "two_class"):
        for seed in (0, 1):
            cfg = compose_cfg(*TINY, "logger=none", f"sampler={sampler}", f"seed={seed}",
                              f"paths.root={tmp_path / 'runs'}")
            run_job(cfg, root / f"sampler={sampler}" / f"seed={seed}", {"sampler": sampler})
    result = build_report([tmp_path / "runs"], tmp_path / "report", reps=REPS)
    inventory = result.inventory.runs
    assert (inventory["state"] == "completed").all() and len(inventory) == 4
    assert set(inventory["sampler"]) == {"uniform", "two_class"}
    assert set(inventory["config_key"]) == {"sampler=uniform", "sampler=two_class"}
    info = result.analysis.task_info
    assert set(info["unit"]) == {"ground-truth kind"} and result.analysis.seeds == [0, 1]
    assert set(info["test_sets"]) == {"majority_slow"}
    assert set(result.analysis.tasks) <= set(info["task"])
    assert (result.tables["aggregates"]["n_runs"] == 2).all()
    assert set(result.poi["algorithm"]) == {"two_class"}
    assert (result.poi["verdict"] == "too few runs").all()
    assert result.analysis.progress == [0.0, 0.5, 1.0]
    text = result.report.read_text()
    assert "two_class" in text and "uniform" in text and "No verdict: too few runs" in text
    assert set(result.figures) >= {"interval_estimates", "sample_efficiency", "per_kind"}
    assert all(p.stat().st_size > 0 for paths in result.figures.values() for p in paths)
    shutil.copy(result.report, tmp_path / "report_copy.md")  # readable when debugging


# --------------------------------------------------------------------------- what a report may claim


def _small_sweep(root: Path, n_seeds: int, **kwargs) -> Path:
    for sampler in SHIFTS:
        for seed in range(n_seeds):
            write_run(root, sampler, seed, n_traces=8, **kwargs)
    return root


def test_three_runs_per_side_print_no_interval_and_no_verdict(tmp_path):
    result = build_report(_small_sweep(tmp_path / "runs", 3), tmp_path / "out", reps=REPS,
                          figures=False)
    a = result.analysis
    assert not a.has_intervals and a.n_verdicts == 0
    interval_columns = [c for c in a.aggregates if c.endswith(("_lo", "_hi"))]
    assert a.aggregates[interval_columns].isna().all().all()
    assert a.poi[["diff_lo", "diff_hi", "lo", "hi", "p_holm"]].isna().all().all()
    assert set(a.poi["verdict"]) == {"too few runs"}
    assert a.poi[["power", "seeds_for_80"]].isna().all().all()
    assert set(a.poi["power_note"]) == {"not computed: too few runs (3 and 3; 5 per side needed)"}
    for frame, columns in ((a.breakdowns, ["mean_lo", "mean_hi"]), (a.curves, ["lo", "hi"]),
                           (a.profiles, ["lo", "hi"])):
        assert frame[columns].isna().all().all()
    text = result.report.read_text()
    answer = text.split("## Answer")[1].split("## Aggregate")[0]
    assert ("**No verdict: too few runs (3 per sampler; intervals and verdicts need 5, so 2 "
            "more).** Run 2 more seed(s) of every sampler") in answer
    assert not re.search(r"beats|is worse than|better|\[", answer)  # no verdict, no interval
    assert answer.count("power not computed (too few runs)") == len(a.poi)
    comparisons = text.split("## Comparisons with the baseline")[1].split("##")[0]
    not_computed = "not computed: too few runs (3 and 3; 5 per side needed)"
    assert comparisons.count(f"| {not_computed} | {not_computed} |") == len(a.poi)
    aggregates = text.split("## Aggregate scores")[1].split("## Methods")[0]
    assert "[" not in aggregates.split("\n|---")[1]  # table body: points only
    assert "no verdict: too few runs" in result.summary


def test_five_runs_per_side_print_intervals_and_verdicts_with_their_methods(cli_report):
    text = (cli_report / "report.md").read_text()
    methods = text.split("## Methods")[1].split("## Tasks")[0]
    for method in ("Student-t interval over runs", "the paired t interval", "Welch t interval",
                   "Holm-Bonferroni over all 10 verdicts of this report",
                   "rliable's stratified percentile bootstrap (200 reps)",
                   "rliable's stratified independent bootstrap (200 reps)",
                   "no interval and no verdict from fewer than 5 runs per side",
                   "the earlier convention was 3"):
        assert method in methods, method
    # the measured coverage the report prints is the one the simulation tests re-measure
    assert (f"{MEASURED_COVERAGE['bootstrap_iqm'][5]:.2f} at n = 5, "
            f"{MEASURED_COVERAGE['bootstrap_iqm'][10]:.2f} at n = 10") in methods
    header = text.split("## Aggregate scores")[1].split("\n")[2]
    assert "IQM [95% bootstrap]" in header and "mean [95% t]" in header
    assert re.search(r"\| 1 \| plume_dynamic \| 5 \| 4 \| 0\.\d{3} \[0\.\d{3}, 0\.\d{3}\] \|", text)
    comparisons = text.split("## Comparisons with the baseline")[1].split("##")[0]
    assert "difference of means [95% t of the design]" in comparisons and "degenerate" in comparisons
    assert ("| power at the observed difference (the design's test; conservative: Bonferroni "
            "level) | seeds per side for 80% power |") in comparisons
    assert re.search(r"\| better \| 1\.00 at 0\.005 \| 5 \|", comparisons)
    assert re.search(r"\| paired t \| \+0\.\d{3} \[", comparisons)
    assert ("- **Power** of each verdict's test at the observed difference, at level 0.05/m "
            "with m = 10") in methods


def test_verdicts_are_holm_corrected_over_the_whole_report(cli_report):
    poi = pd.read_csv(cli_report / "tables" / "probability_of_improvement.csv")
    assert len(poi) == 10  # 2 samplers x (all tasks + 4 kinds)
    assert np.allclose(poi["p_holm"], holm(poi["p_value"].to_numpy()))
    assert (poi["p_holm"] >= poi["p_value"]).all()
    significant = poi["p_holm"] < 0.05
    assert (poi.loc[significant, "verdict"].isin(["better", "worse"])).all()
    assert (poi.loc[~significant, "verdict"] == "no significant difference").all()
    # plume_static's planted 0.03 is below what 5 runs resolve after correction
    static = poi[poi["algorithm"] == "plume_static"]
    assert (static["verdict"] == "no significant difference").all()
    assert (static["p_value"] < static["p_holm"]).all()
    # every verdict's power is at Holm's first-step (Bonferroni) level over the 10 verdicts,
    # of the paired t (the sides are the same seeds); Welch's seeds beside it
    from plume.report.paired import paired_power, paired_seeds_for_power
    from plume.report.power import seeds_for_power

    assert np.allclose(poi["power_level"], 0.05 / 10) and (poi["design"] == "paired").all()
    for row in poi.itertuples():
        assert row.power == pytest.approx(paired_power(row.diff, row.sd_diff, row.n_runs, 0.005))
        assert row.seeds_for_80 == paired_seeds_for_power(row.diff, row.sd_diff, 0.005, least=5)
        assert row.seeds_for_80_welch == seeds_for_power(row.diff, row.sd, row.sd_baseline,
                                                         0.005, least=5)
    assert (static["power"] < 0.8).all() and (static["seeds_for_80"] > 5).all()


def test_a_one_seed_report_never_says_worse(tmp_path):
    for sampler, shift in (("uniform", 0.5), ("plume_dynamic", 0.0)):
        write_run(tmp_path, sampler, 0, shift=shift, n_traces=8)
    result = build_report(tmp_path, tmp_path / "out", reps=50, figures=False)
    assert set(result.poi["verdict"]) == {"too few runs"}
    assert not re.search(r"\bworse\b|\bbeats\b", "\n".join(result.answers))


def test_saturated_kinds_are_listed_and_left_out_of_the_comparisons(tmp_path):
    """Every sampler scores the ceiling on the fast kinds (as on TraceBench): those tasks
    cannot separate samplers, so only the slow kinds are compared."""
    ceiling = {"fast_low-var": 6.0, "fast_high-var": 6.0}
    root = _small_sweep(tmp_path / "runs", 5, fixed=ceiling)
    result = build_report(root, tmp_path / "out", reps=REPS, figures=False)
    a = result.analysis
    assert a.tasks == ["slow_high-var", "slow_low-var"]
    assert a.saturated == {"fast_high-var": 1.0, "fast_low-var": 1.0}
    assert all(m.shape == (5, 2) for m in a.matrices.values())
    assert set(a.poi["scope"]) == {"all tasks", "slow_high-var", "slow_low-var"}
    roles = a.task_info.set_index("task")["role"]
    assert roles["fast_low-var"] == "saturated" and roles["slow_low-var"] == "compared"
    text = result.report.read_text()
    assert "- `fast_low-var`: ground-truth kind of env `tracebench`, trained on " \
           "`majority_fast`, traces from test set(s) majority_fast, majority_slow: saturated " \
           "(every run scores 1.000), left out" in text
    assert "Saturated task(s) left out of the comparisons" in text
    kinds = a.breakdowns[a.breakdowns["grouping"] == "label"].set_index(["group", "algorithm"])
    assert kinds.loc[("fast_low-var", "uniform"), "saturated"]


def test_a_kind_is_one_task_pooled_over_the_test_sets_that_hold_it(tmp_path):
    """Per run, a kind's score is the mean over its traces of every test set (by hand)."""
    scores = load_scores(scan_runs(_small_sweep(tmp_path / "runs", 2)))
    analysis = analyse(scores, reps=50)
    scores = normalise(scores)
    final = scores[(scores["progress"] == 1.0) & (scores["sampler"] == "uniform")]
    expected = final[final["label"] == "slow_low-var"].groupby("seed")["score"].mean()
    column = analysis.tasks.index("slow_low-var")
    assert np.allclose(analysis.matrices["uniform"][:, column], expected.to_numpy())
    assert set(analysis.task_info["test_sets"]) == {"majority_fast, majority_slow"}


def test_without_kinds_tasks_are_clusters_and_without_clusters_test_sets(tmp_path):
    clustered = analyse(load_scores(scan_runs(_small_sweep(
        tmp_path / "c", 2, labelled=False, clusters=True))), reps=50)
    assert clustered.tasks == ["cluster 0", "cluster 1", "cluster 2", "cluster 3"]
    assert set(clustered.task_info["unit"]) == {"cluster"}
    plain = analyse(load_scores(scan_runs(_small_sweep(tmp_path / "p", 2, labelled=False))),
                    reps=50)
    assert plain.tasks == list(TEST_SETS) and set(plain.task_info["unit"]) == {"test set"}


def test_cluster_breakdowns_name_the_kinds_they_hold(tmp_path):
    analysis = analyse(load_scores(scan_runs(_small_sweep(tmp_path, 2, clusters=True))),
                       reps=50)
    clusters = analysis.breakdowns[analysis.breakdowns["grouping"] == "cluster"]
    members = dict(zip(clusters["group"], clusters["members"]))
    assert members == {str(i): f"{kind} 100%" for i, kind in enumerate(LABELS)}
    kinds = analysis.breakdowns[analysis.breakdowns["grouping"] == "label"]
    assert dict(zip(kinds["group"], kinds["members"]))["slow_low-var"] == "cluster 2 100%"
