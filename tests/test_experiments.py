"""The paper-figure commands: experiment configs, job lists, the runner and the figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments import runner
from experiments.catalog import DATASET_FIGURES, DATASETS, MAIN_SAMPLERS, TRAINING_FIGURES
from plume.harness.config.schema import validate
from tests.conftest import TINY, conf_options

# Hydra 1.3 warns that conf/hydra/launcher/<name>.yaml is matched to the plugin schema of the
# same name (the figure command silences it; pytest resets warning filters per test).
pytestmark = pytest.mark.filterwarnings(
    "ignore:(?s).*is validated against ConfigStore schema:UserWarning")
EXPERIMENTS = conf_options("experiment")
QUICK = [name for name in EXPERIMENTS if name.endswith("_quick")]
BUDGET_KEYS = {"exp_name", "train.total_steps", "train.eval_points"}


def _flat(cfg) -> dict[str, object]:
    """Every leaf of a composed config as {dotted key: value}."""
    out: dict[str, object] = {}

    def walk(node, prefix):
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = node

    walk(OmegaConf.to_container(cfg, resolve=True), "")
    return out


TRAINED = list(TRAINING_FIGURES)
# What a quick variant may change besides budgets: DQN's schedules scale with the budget and
# its learning rate is raised (each such config says why in its comments).
DQN_SCHEDULE_KEYS = {"algo.learning_rate", "algo.buffer_size", "algo.learning_starts",
                     "algo.target_update_interval", "algo.eps_decay_steps"}
PAPER_BUDGETS = {"quickstart": 4_000_000, "fig8": 4_000_000, "fig9": 4_000_000,
                 "fig8_dqn": 4_000_000, "fig9_dqn": 4_000_000, "fig3": 1_000_000_000,
                 "fig6a": 400_000_000, "fig6a_pensieve": 400_000_000, "fig6b": 5_000_000,
                 "fig6c": 5_000_000}
PAPER_LEARNERS = {"fig3": ("dqn", "gelato"), "fig6a": ("a2c", "gelato"),
                  "fig6a_pensieve": ("a2c", "pensieve"), "fig6b": ("a2c", "mlp"),
                  "fig6c": ("ppo", "mlp"), "fig8_dqn": ("dqn", "mlp"), "fig9_dqn": ("dqn", "mlp")}


def test_every_experiment_of_a_figure_exists_with_a_quick_variant():
    bases = {c.base for f in TRAINING_FIGURES.values() for g in f.groups for c in g.curves}
    assert bases == set(PAPER_BUDGETS)
    for base in bases:
        assert base in EXPERIMENTS and f"{base}_quick" in EXPERIMENTS
    assert {q.removesuffix("_quick") for q in QUICK} <= set(EXPERIMENTS)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_config_composes_and_validates(compose_cfg, name):
    cfg = compose_cfg(f"experiment={name}")
    job = validate(cfg)
    assert job.exp_name == name  # exp_name = the config's name: the first folder of its runs
    base = name.removesuffix("_quick")
    algo, network = PAPER_LEARNERS.get(base, ("ppo", "mlp"))
    assert (job.algo_name, cfg.algo.get("network", "mlp")) == (algo, network)
    if name == base:  # paper profile: the paper's budget, an evaluation every 5 %
        assert (job.train.total_steps, job.train.eval_points) == (PAPER_BUDGETS[base], 20)


# Quick variants that train a learner tuned for their budget (conf/hparams_search/): the paper
# profile keeps the paper's preset.
TUNED_QUICK = {"fig6a_quick": ("a2c_gelato_quick", "a2c_gelato"),
               "fig6a_pensieve_quick": ("a2c_pensieve_quick", "a2c_pensieve"),
               "fig6b_quick": ("a2c_aurora_quick", "a2c_aurora"),
               "fig6c_quick": ("ppo_lb_quick", "ppo_lb")}


@pytest.mark.parametrize("name", QUICK)
def test_a_quick_variant_changes_only_budgets_and_exp_name(compose_cfg, name):
    quick = _flat(compose_cfg(f"experiment={name}"))
    base_name = name.removesuffix("_quick")
    base = _flat(compose_cfg(f"experiment={base_name}"))
    if name in TUNED_QUICK:  # compared with the base figure trained with the tuned preset
        tuned, paper = TUNED_QUICK[name]
        assert base == _flat(compose_cfg(f"experiment={base_name}", f"algo={paper}"))
        assert quick["algo.learning_rate"] != base["algo.learning_rate"]
        base = _flat(compose_cfg(f"experiment={base_name}", f"algo={tuned}"))
    assert quick.keys() == base.keys()
    changed = {key for key in quick if quick[key] != base[key]}
    allowed = BUDGET_KEYS | (DQN_SCHEDULE_KEYS if quick["algo.name"] == "dqn" else set())
    assert "exp_name" in changed and changed <= allowed, changed
    assert quick["train.total_steps"] < base["train.total_steps"]


def test_figures_that_reuse_runs_have_the_budgets_of_those_runs(compose_cfg):
    for fig8, fig9 in (("fig8", "fig9"), ("fig8_dqn", "fig9_dqn")):
        for suffix in ("", "_quick"):
            own = _flat(compose_cfg(f"experiment={fig8}{suffix}"))
            reused = _flat(compose_cfg(f"experiment={fig9}{suffix}"))
            assert {k for k in own if own[k] != reused[k]} == {"exp_name"}


def test_fig9_quick_trains_both_learners_on_every_scenario_with_10_seeds_where_effects_are_small():
    jobs = runner.figure_jobs("fig9", "quick")
    # 2 learners x 3 datasets x 3 samplers x 5 seeds, + 5 more seeds for PPO S2, S3 and DQN S3
    assert len(jobs) == 90 + 45 and len(set(jobs)) == 135
    assert {j.experiment for j in jobs} == {"fig9_quick", "fig9_dqn_quick"}
    seeds: dict[tuple, set[int]] = {}
    for j in jobs:
        seeds.setdefault((j.experiment, j.axis("env.dataset"), j.axis("sampler")), set()).add(j.seed)
    assert set(seeds) == {(e, d, s) for e in ("fig9_quick", "fig9_dqn_quick") for d in DATASETS
                          for s in MAIN_SAMPLERS}
    ten = {("fig9_quick", "balanced"), ("fig9_quick", "majority_slow"),
           ("fig9_dqn_quick", "majority_slow")}
    for (experiment, dataset, _), got in seeds.items():
        assert got == set(range(10 if (experiment, dataset) in ten else 5)), (experiment, dataset)
    assert jobs[0].args("runs") == [
        "experiment=fig9_quick", "env.dataset=majority_fast", "sampler=uniform", "seed=0",
        "paths.root=runs",
    ]
    paper = runner.figure_jobs("fig9", "paper")
    assert len(paper) == 135 and {j.experiment for j in paper} == {"fig9", "fig9_dqn"}
    # --seeds replaces every count, the groups' too
    assert {j.seed for j in runner.figure_jobs("fig9", "quick", 3)} == {0, 1, 2}
    assert len(runner.figure_jobs("fig9", "quick", 3)) == 54


def test_figures_share_runs_instead_of_training_them_twice():
    fig9 = set(runner.figure_jobs("fig9", "quick"))
    fig10 = runner.figure_jobs("fig10", "quick")
    assert set(fig10) <= fig9 and {j.axis("sampler") for j in fig10} == {"plume_dynamic"}
    fig8 = runner.figure_jobs("fig8", "quick")
    assert len(fig8) == 45  # PPO: 4 samplers; DQN: 4 samplers + Random with PER; 5 seeds
    new = {(j.experiment, j.axis("sampler"), j.axis("algo.per")) for j in fig8 if j not in fig9}
    assert new == {("fig8_quick", "trace_error", None), ("fig8_dqn_quick", "trace_error", None),
                   ("fig8_dqn_quick", "uniform", "true")}
    quickstart = runner.figure_jobs("quickstart", "quick")
    assert len(quickstart) == 15 and {j.experiment for j in quickstart} == {"quickstart_quick"}
    every = runner.figure_jobs("all", "quick")
    sizes = {name: len(runner.figure_jobs(name, "quick")) for name in TRAINED}
    assert sizes == {"quickstart": 15, "fig3": 20, "fig6a": 25 + 6, "fig6b": 15 + 4,
                     "fig6c": 15 + 4, "fig8": 45, "fig9": 135, "peers": 140}
    # fig8 reuses 30 of fig9's runs; peers reuses 15 of fig9's and 15 each of fig6a-c's
    assert len(every) == len(set(every)) == sum(sizes.values()) - 30 - 60
    for name in DATASET_FIGURES:
        assert runner.figure_jobs(name, "quick") == []


def test_controllers_are_plume_eval_jobs_on_their_group_s_test_traces(tmp_path):
    jobs = [j for j in runner.figure_jobs("fig6a", "quick") if j.config == "eval"]
    assert {(j.group, j.label) for j in jobs} == {
        (g, c) for g in ("gelato", "pensieve") for c in ("bba", "robust_mpc", "bola_v1")}
    pensieve = next(j for j in jobs if j.group == "pensieve" and j.label == "bba")
    assert pensieve.args("runs", ["logger=none", "env.n_envs=4"]) == [
        "env=abr", "env.dataset=pensieve_synthetic", "env.variant=pensieve", "controller=bba",
        "seed=0", "paths.root=runs"]  # keys that do not change an evaluation are left out
    planned = runner.plan([pensieve], tmp_path, ["logger=none"])
    assert planned[0].run_dir == tmp_path / "controllers" / (
        "controller=bba,env.dataset=pensieve_synthetic,env.variant=pensieve,env=abr") / "seed=0"
    assert planned[0].total_steps == 0
    with pytest.raises(Exception, match="controller='nope' is not a controller of env 'abr'"):
        runner.plan([runner.Job("", ("env=abr", "controller=nope"), 0, config="eval")], tmp_path)


def test_plan_predicts_the_run_directory_plume_train_uses(tmp_path):
    jobs = runner.figure_jobs("fig9", "quick")[:2]
    planned = runner.plan(jobs, tmp_path, ["logger=none"])
    assert planned[0].run_dir == tmp_path / "fig9_quick" / (
        "env.dataset=majority_fast,sampler=uniform") / "seed=0"
    assert [p.state for p in planned] == [None, None]
    planned[1].run_dir.mkdir(parents=True)
    (planned[1].run_dir / "status.json").write_text(json.dumps({"state": "completed"}))
    assert [p.state for p in runner.plan(jobs, tmp_path, ["logger=none"])] == [None, "completed"]


def test_a_bad_override_fails_before_anything_trains(tmp_path):
    with pytest.raises(Exception, match="train.total_steps"):
        runner.plan(runner.figure_jobs("fig9", "quick")[:1], tmp_path, ["train.total_steps=-5"])


def test_dry_run_prints_every_job_and_trains_nothing(tmp_path, capsys):
    code = runner.main(["fig9", "--dry-run", "--root", str(tmp_path / "runs"),
                        "--out", str(tmp_path / "reports")])
    printed = capsys.readouterr().out
    assert code == 0
    assert "135 job(s), 0 already completed, 135 to train" in printed
    assert printed.count("plume-train experiment=fig9_quick ") == 75
    assert printed.count("plume-train experiment=fig9_dqn_quick ") == 60
    assert "seed=2" in printed and "env.dataset=majority_slow,sampler=plume_dynamic" in printed
    assert "launcher overrides: hydra/launcher=joblib hydra.launcher.n_jobs=2" in printed
    assert not (tmp_path / "runs").exists() and not (tmp_path / "reports").exists()


def test_groups_choose_which_jobs_of_a_figure_are_planned(tmp_path, capsys):
    peers = TRAINING_FIGURES["peers"]
    assert [g.key for g in peers.only(["lb", "cc"]).groups] == ["cc", "lb"]  # figure's order
    assert peers.only(None) is peers
    jobs = runner.figure_jobs("peers", "quick", groups=["cc", "lb"])
    assert len(jobs) == 2 * 7 * 5 and {j.group for j in jobs} == {"cc", "lb"}
    assert {j.config for j in jobs} == {"train"}
    code = runner.main(["peers", "--groups", "cc,lb", "--dry-run", "--root", str(tmp_path)])
    printed = capsys.readouterr().out
    assert code == 0 and "groups cc, lb, profile quick: 70 job(s)" in printed
    assert printed.count("experiment=fig6b_quick ") == 35
    assert "fig9_quick" not in printed and "fig6a_quick" not in printed


@pytest.mark.parametrize("argv, why", [
    (["peers", "--groups", "cc,tcp"], ("--groups: peers has no group 'tcp'; its groups: "
                                       "tracebench, abr, cc, lb")),
    (["fig7", "--groups", "abr"], "fig7 has none"),
    (["peers", "--groups", "cc", "--seeds", "auto"], "does not go with --seeds auto"),
    (["peers", "--groups", "cc,,lb"], "group keys separated by commas"),
])
def test_groups_that_cannot_be_drawn_are_refused_in_one_line(argv, why, capsys):
    with pytest.raises(SystemExit) as exit_:
        runner.main([*argv, "--dry-run"])
    assert exit_.value.code == 2 and why in capsys.readouterr().err


def test_dataset_figures_render_png_and_pdf(tmp_path):
    from experiments import figures

    fig7 = figures.render("fig7", [], tmp_path / "fig7")
    assert [p.suffix for p in fig7["figure"]] == [".png", ".pdf"]
    assert all(p.stat().st_size > 0 for p in fig7["figure"])
    assert "| Balanced | train | 250 | 250 | 250 | 250 |" in (tmp_path / "fig7" / "composition.md").read_text()
    fig13 = figures.render("fig13", [], tmp_path / "fig13")
    assert all(p.is_file() for p in fig13["figure"])


@pytest.mark.slow
def test_fig12_renders_the_clusters_of_the_three_datasets(tmp_path):
    from experiments import figures

    result = figures.render("fig12", {}, tmp_path / "fig12",
                            cache_dir=tmp_path / "cache")
    assert all(p.is_file() for p in result["figure"])
    assert len((tmp_path / "fig12" / "clusters.txt").read_text().splitlines()) == 3
    assert len(list((tmp_path / "cache").glob("*.json"))) == 3


@pytest.mark.slow  # stage 1-2 on 1000 ABR sessions, 1000 links and 1000 job sequences: ~1 min
def test_fig11_renders_the_clusters_of_abr_cc_and_lb(tmp_path):
    from experiments import figures

    result = figures.render("fig11", {}, tmp_path / "fig11",
                            cache_dir=tmp_path / "cache")
    for panel, env in (("fig11a", "abr"), ("fig11b", "cc"), ("fig11c", "lb")):
        assert [p.name for p in result[panel]] == [f"{panel}_{env}_clusters.png",
                                                    f"{panel}_{env}_clusters.pdf"]
    lines = (tmp_path / "fig11" / "clusters.txt").read_text().splitlines()
    assert [line.split()[1] for line in lines] == ["abr", "cc", "lb"]
    assert "ARI vs the generator's kinds" in lines[0] and "k=" in lines[1]


# Tiny jobs: TINY budgets, no tracker, a cheap stage 1-2 for the Plume samplers.
FAST_ANALYSIS = ["analysis.restarts=2", "analysis.selection.steps=1"]


def test_the_runner_trains_skips_completed_jobs_and_renders(tmp_path, capsys):
    root, out = tmp_path / "runs", tmp_path / "reports"
    argv = ["quickstart", "--seeds", "2", "-j", "2", "--root", str(root), "--out", str(out),
            "--reps", "50", *[f"--override={o}" for o in [*TINY, "logger=none", *FAST_ANALYSIS]]]
    assert runner.main(argv) == 0, capsys.readouterr().out
    first = capsys.readouterr().out
    assert "6 job(s), 0 already completed, 6 to train" in first
    assert "trained 6, skipped 0 (already completed), failed 0" in first
    # One multirun through the joblib launcher, -j 2 as its n_jobs, one aggregate progress line.
    assert "launching 6 job(s): hydra/launcher=joblib hydra.launcher.n_jobs=2" in first
    assert "[6/6] jobs done, 0 failed, 0 running | 12,288/12,288 env steps" in first
    assert "eta 0:00:00" in first
    runs = sorted(root.glob("quickstart_quick/*/seed=*/status.json"))
    assert len(runs) == 6
    assert all(json.loads(p.read_text())["state"] == "completed" for p in runs)
    stamps = {p: p.stat().st_mtime_ns for p in runs}

    assert runner.main(argv) == 0
    second = capsys.readouterr().out
    assert "6 job(s), 6 already completed, 0 to train" in second
    assert "launching" not in second  # the launcher is never handed finished work
    assert {p: p.stat().st_mtime_ns for p in runs} == stamps

    figure = out / "quickstart" / "quickstart_test_score"
    assert figure.with_suffix(".png").is_file() and figure.with_suffix(".pdf").is_file()
    assert (out / "quickstart" / "report" / "report.md").is_file()
    assert "Plume-Dynamic" in second and "n=2" in second


def test_dry_run_estimates_the_runtime_from_the_completed_runs(tmp_path):
    jobs = runner.figure_jobs("quickstart", "quick")
    planned = runner.plan(jobs, tmp_path, ["logger=none"])
    assert runner.estimated_runtime(planned, planned, workers=2).startswith(
        "estimated runtime: 0:09:22 for 15 job(s), 9,000,000 env steps at 8,000 steps/s")
    done = planned[0]
    done.run_dir.mkdir(parents=True)
    (done.run_dir / "status.json").write_text(json.dumps(
        {"state": "completed", "summary": {"steps_per_s": 10_000.0}}))
    planned = runner.plan(jobs, tmp_path, ["logger=none"])
    pending = [p for p in planned if not p.completed]
    line = runner.estimated_runtime(pending, planned, workers=2)
    # 14 x 600k steps at 10k steps/s per job, two at a time: 420 s
    assert line.startswith("estimated runtime: 0:07:00 for 14 job(s), 8,400,000 env steps at "
                           "10,000 steps/s per job (the median of 1 completed run(s) here)")


def test_an_environment_figure_trains_its_curves_and_evaluates_its_controllers(tmp_path, capsys):
    """fig6b with one seed: 3 Aurora runs through plume-train, 4 classic controllers through
    plume-eval, then the curves, the report (no verdict from 1 run per side) and a summary
    that lists the controllers beside the learned runs."""
    root, out = tmp_path / "runs", tmp_path / "reports"
    overrides = ["train.total_steps=2048", "train.eval_points=2", "train.progress_every_s=0",
                 "env.n_envs=8", "algo.n_steps=8", "logger=none", *FAST_ANALYSIS]
    argv = ["fig6b", "--seeds", "1", "--root", str(root), "--out", str(out), "--reps", "50",
            *[f"--override={o}" for o in overrides]]
    assert runner.main(argv) == 0, capsys.readouterr().out
    printed = capsys.readouterr().out
    assert "7 job(s), 0 already completed, 7 to train" in printed
    assert "launching 4 job(s)" in printed and "launching 3 job(s)" in printed
    controllers = sorted(p.parent.parent.name
                         for p in root.glob("controllers/*/seed=0/status.json"))
    assert controllers == [f"controller={c},env=cc" for c in
                           ("aimd", "constant_rate", "cubic", "oracle")]
    summary = (out / "fig6b" / "summary.md").read_text()
    assert "no verdict, too few runs" in summary
    assert "oracle 1.000 (raw" in summary and "constant_rate -0.000 (raw" in summary
    assert "Plume-Dynamic" in summary and "(n=1)" not in summary  # no interval from one run
    figure = out / "fig6b" / "fig6b_cc"
    assert figure.with_suffix(".png").is_file() and figure.with_suffix(".pdf").is_file()
    assert (out / "fig6b" / "report" / "tables" / "controllers.csv").is_file()

    # the cross-environment table of `peers`, on these runs: a row per sampler, a run per cell
    from dataclasses import replace

    from experiments.catalog import TRAINING_FIGURES
    from experiments.curves import comparison_table, score_table

    planned = runner.plan(runner.figure_jobs("fig6b", "quick", 1), root, overrides)
    roles = {p.run_dir: (p.job.group, p.job.label) for p in planned}
    figure = replace(TRAINING_FIGURES["fig6b"], table=True)
    table = comparison_table(figure, score_table(roles), {}, roles)
    assert table[0] == "| sampler | Aurora (A2C) on aurora link tuples |"
    assert [row.split(" | ")[0] for row in table[2:]] == ["| Random", "| Plume-Static",
                                                          "| Plume-Dynamic"]
    assert all(row.endswith("(n=1) |") for row in table[2:])  # no interval from one run


def test_a_figure_counts_each_run_once_though_it_is_drawn_on_every_test_set(monkeypatch, tmp_path):
    """Five seeds evaluated on three test sets are five learned runs, not fifteen."""
    import pandas as pd

    from experiments import curves
    from experiments.catalog import Curve, Figure, Group

    group = Group("g", "PPO", (Curve("Random", "fig9", ()),), "Random", "tracebench")
    figure = Figure("figX", "a figure", "a claim", (group,), "figx")
    scores = pd.DataFrame(
        [{"group": "g", "curve": "Random", "algo": "ppo", "seed": seed, "run_dir": f"r{seed}",
          "test_set": test_set, "label": "fast", "progress": progress, "score": 1.0,
          "normalised": 0.5}
         for seed in range(5) for test_set in ("a", "b", "c") for progress in (0.5, 1.0)])
    drawn = []
    monkeypatch.setattr(curves, "save_figure", lambda fig, stem: drawn.append(fig) or [])
    curves.curves_figure(figure, scores, tmp_path / "figx")
    title = drawn[0]._suptitle.get_text()
    assert title.endswith("; 5 learned runs")
    assert len(drawn[0].axes) == 3  # one panel per test set


def _planned(seed: int, sampler: str, together: bool = True) -> runner.PlannedJob:
    job = runner.Job("fig6b_quick", (f"sampler={sampler}",), seed)
    return runner.PlannedJob(job, [f"sampler={sampler}", f"seed={seed}"], Path(f"{seed}"),
                             together=together)


def test_seeds_of_one_curve_are_packed_in_runs_of_consecutive_seeds():
    pending = [_planned(0, "a"), _planned(1, "a"), _planned(2, "a"), _planned(4, "a"),
               _planned(0, "b"), _planned(1, "b"), _planned(0, "c", together=False),
               _planned(1, "c", together=False)]
    packs = runner.seed_packs(pending, 2)
    assert [[(p.job.overrides[0], p.job.seed) for p in pack] for pack in packs] == [
        [("sampler=a", 0), ("sampler=a", 1)], [("sampler=a", 2)], [("sampler=a", 4)],
        [("sampler=b", 0), ("sampler=b", 1)], [("sampler=c", 0)], [("sampler=c", 1)]]
    assert runner.pack_args(packs[0]) == ["sampler=a", "seed=0", "train.seeds_in_process=2"]
    assert runner.pack_args(packs[1]) == ["sampler=a", "seed=2"]
    assert [len(p) for p in runner.seed_packs(pending, 1)] == [1] * 8


def test_a_figure_with_seeds_in_process_trains_each_seed_into_its_own_directory(tmp_path,
                                                                                capsys):
    root, out = tmp_path / "runs", tmp_path / "reports"
    overrides = ["train.total_steps=2048", "train.eval_points=2", "train.progress_every_s=0",
                 "env.n_envs=8", "algo.n_steps=8", "logger=none", *FAST_ANALYSIS]
    argv = ["fig6b", "--seeds", "2", "--seeds-in-process", "2", "--root", str(root),
            "--out", str(out), "--reps", "50", *[f"--override={o}" for o in overrides]]
    assert runner.main(argv) == 0, capsys.readouterr().out
    printed = capsys.readouterr().out
    assert "launching 3 job(s) (6 seeds, up to 2 trained together per process)" in printed
    assert "trained 10, skipped 0 (already completed), failed 0" in printed
    runs = sorted(root.glob("fig6b_quick/*/seed=*/status.json"))
    assert len(runs) == 6 and all(json.loads(p.read_text())["state"] == "completed"
                                  for p in runs)
    assert runner.main(argv) == 0
    assert "launching" not in capsys.readouterr().out
