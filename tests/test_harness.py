"""The harness end to end: config composition and validation, one tiny job, a tiny sweep."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf

from plume.harness.apps.train import run_job
from plume.harness.config.schema import ConfigError, validate
from plume.harness.training.seeding import spawn_streams, torch_seed
from plume.runs.store import RunDirectory
from plume.traces import load_tracebench
from tests.conftest import TINY, conf_options, plume_train_env


@pytest.mark.parametrize(
    "group", ["env", "algo", "sampler", "analysis", "logger", "paths"],
)
def test_every_option_of_every_group_composes_and_validates(compose_cfg, group):
    options = conf_options(group)
    assert options, f"conf/{group} is empty"
    for option in options:
        job = validate(compose_cfg(f"{group}={option}"))
        assert job.seed == 0


def test_defaults_are_the_documented_job(compose_cfg):
    job = validate(compose_cfg())
    assert (job.env.name, job.env.dataset, job.algo_name, job.sampler_name) == (
        "tracebench", "majority_fast", "ppo", "uniform"
    )
    assert job.logger.name == "wandb" and job.logger.mode == "offline"
    assert job.algo.hidden_sizes == (256, 256) and job.algo.activation == "elu"
    assert job.env.test_sets == ["majority_fast", "balanced", "majority_slow"]


def test_unknown_sampler_group_option_lists_the_valid_ones(compose_cfg):
    with pytest.raises(MissingConfigException) as err:
        compose_cfg("sampler=nosuchsampler")
    assert "uniform" in str(err.value)


@pytest.mark.parametrize(
    "override, expected",
    [
        ("sampler.name=nosuchsampler", "valid choices: cl2, cluster_uniform, genet, plr, plume_dynamic"),
        ("train.total_steps=-5", "train.total_steps must be a positive step budget, got -5"),
        ("train.total_steps=abc", "train.total_steps"),
        ("env.dataset=majority_medium", "majority_fast, balanced, majority_slow"),
        ("env.test_sets=[nowhere.npz]", "env.test_sets[0]='nowhere.npz'"),
        ("algo.gamma=1.5", "gamma"),
        ("+algo.learning_rat=0.1", "algo.learning_rat"),
        ("+sampler.alpha=0.5", "sampler 'uniform' has no parameter(s) alpha"),
        ("env.n_envs=0", "env.n_envs must be >= 1"),
        ("logger.mode=loud", "logger.mode='loud' is not known"),
        ("seed=-1", "seed must be a non-negative integer"),
    ],
)
def test_bad_input_fails_before_work_with_a_message_naming_the_key(compose_cfg, override, expected):
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg(override))
    assert expected in str(err.value)


def test_seed_streams_are_independent_and_reproducible():
    a, b = spawn_streams(0), spawn_streams(0)
    assert torch_seed(a["torch"]) == torch_seed(b["torch"])
    draws = {name: np.random.default_rng(s).random(4) for name, s in a.items()}
    assert len({tuple(v) for v in draws.values()}) == len(draws)
    assert torch_seed(spawn_streams(1)["torch"]) != torch_seed(a["torch"])


def test_a_tiny_job_writes_the_whole_run_directory(compose_cfg, tmp_path):
    cfg = compose_cfg(*TINY, "logger=wandb")
    summary = run_job(cfg, tmp_path, {"sampler": "uniform"})
    run = RunDirectory(tmp_path)

    status = run.status()
    assert status["state"] == "completed" and status["error"] is None
    assert status["summary"]["env_steps"] == 2048 == summary["env_steps"]
    assert status["elapsed_s"] > 0 and status["versions"]["torch"] == torch.__version__

    train = run.read_train()
    assert list(train["env_steps"]) == [512, 1024, 1536, 2048]  # 8 envs x 64 steps per update
    for metric in ["losses/value_loss", "losses/approx_kl", "perf/steps_per_s"]:
        assert np.isfinite(train[metric]).all()

    evals = run.read_table("eval.parquet")
    slow = load_tracebench("majority_slow", "test")
    assert sorted(evals["progress"].unique()) == [0.0, 0.5, 1.0]
    assert len(evals) == 3 * len(slow)
    final = evals[evals["progress"] == 1.0].sort_values("trace")
    assert (final["trace_id"].to_numpy() == slow.trace_ids).all()
    assert (final["label"].to_numpy() == slow.labels).all()
    assert (final["length"] == 99).all()
    # every test trace carries its training cluster: here the clusters are the four kinds
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(final["label"], final["cluster"].astype(int)) == 1.0
    # QoE = bitrate - 6 stall, summed over the 99 chunks of each test episode.
    np.testing.assert_allclose(final["return"], final["quality"] - 6 * final["stall"], rtol=1e-9)
    assert final["quality"].between(99 * 1.0, 99 * 6.0).all()

    weights = run.read_table("sampler.parquet")
    at_end = weights[(weights["progress"] == 1.0) & (weights["grouping"] == "label")]
    expected = {"fast_high-var": 0.375, "fast_low-var": 0.375, "slow_high-var": 0.125,
                "slow_low-var": 0.125}
    assert dict(zip(at_end["group"], at_end["weight"].round(12))) == expected

    checkpoint = run.load_checkpoint()
    assert checkpoint["env_steps"] == 2048 and checkpoint["sampler"]["name"] == "uniform"
    config = OmegaConf.load(tmp_path / "config.yaml")
    assert config.train.total_steps == 2048

    offline = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("run-*.wandb"))
    assert status["wandb_run"] == str(offline[0])


def test_same_seed_same_results_different_seed_different_results(compose_cfg, tmp_path):
    curves, returns = [], []
    for name, seed in [("a", 3), ("b", 3), ("c", 4)]:
        run_job(compose_cfg(*TINY, "logger=none", f"seed={seed}"), tmp_path / name)
        run = RunDirectory(tmp_path / name)
        curves.append(run.read_train()["losses/value_loss"].to_numpy())
        returns.append(run.read_table("eval.parquet")["return"].to_numpy())
    np.testing.assert_array_equal(curves[0], curves[1])
    np.testing.assert_array_equal(returns[0], returns[1])
    assert not np.array_equal(curves[0], curves[2])
    for table in ("eval.parquet", "sampler.parquet", "score.json", "config.yaml"):
        assert (tmp_path / "a" / table).read_bytes() == (tmp_path / "b" / table).read_bytes()


def test_a_failing_job_records_why(compose_cfg, tmp_path, monkeypatch):
    from plume.harness.training.loop import TrainingLoop

    def crash(self):  # a bug while training (bad data is refused before the run exists)
        raise RuntimeError("a bug in training")

    monkeypatch.setattr(TrainingLoop, "run", crash)
    with pytest.raises(RuntimeError, match="a bug in training"):
        run_job(compose_cfg(*TINY, "logger=none"), tmp_path / "run")
    status = RunDirectory(tmp_path / "run").status()
    assert status["state"] == "failed" and status["error"] == "RuntimeError: a bug in training"
    assert "Traceback" in status["traceback"] and "crash" in status["traceback"]


def test_multirun_writes_the_sweep_layout_and_skips_completed_jobs(tmp_path):
    command = [
        sys.executable, "-m", "plume.harness.apps.train", "-m",
        "sampler=uniform", "seed=0,1", f"paths.root={tmp_path}", "logger=none", *TINY,
    ]
    first = subprocess.run(command, capture_output=True, text=True, env=plume_train_env())
    assert first.returncode == 0, first.stderr[-3000:]
    sweep = tmp_path / "default"
    job_dirs = sorted(p.parent for p in sweep.glob("*/seed=*/status.json"))
    assert [p.relative_to(sweep).as_posix() for p in job_dirs] == [
        # the dirname holds every override that changes training, seed excluded
        f"{job_dirs[0].parent.name}/seed=0", f"{job_dirs[0].parent.name}/seed=1",
    ]
    assert job_dirs[0].parent.name.startswith("algo.hidden_sizes=[32,32],algo.n_steps=64")
    assert "sampler=uniform" in job_dirs[0].parent.name
    assert (sweep / "multirun.yaml").is_file()
    stamps = {}
    for job in job_dirs:
        status = json.loads((job / "status.json").read_text())
        assert status["state"] == "completed"
        assert (job / "eval.parquet").is_file() and (job / "train.jsonl").is_file()
        stamps[job] = (job / "eval.parquet").stat().st_mtime_ns

    second = subprocess.run(command, capture_output=True, text=True, env=plume_train_env())
    assert second.returncode == 0, second.stderr[-3000:]
    assert (second.stdout + second.stderr).count("already completed") == 2
    for job, stamp in stamps.items():
        assert (job / "eval.parquet").stat().st_mtime_ns == stamp


def test_a_multirun_of_a_jobs_file_runs_exactly_its_jobs(compose_cfg, tmp_path):
    """``hydra.sweeper.jobs``: two jobs that are no cartesian product (the product of their
    values would be four jobs), each after the command line's overrides that it does not set
    itself (algo.n_steps=32 replaces TINY's 64), in the folder plume-train uses for them."""
    jobs = [["env=tracebench", "sampler=uniform", "seed=0"],
            ["env=tracebench", "algo.n_steps=32", "seed=1"]]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    root = tmp_path / "runs"
    common = [*TINY, "logger=none", f"paths.root={root}"]
    command = [sys.executable, "-m", "plume.harness.apps.train", "-m",
               f"hydra.sweeper.jobs={tmp_path / 'jobs.json'}", *common]
    done = subprocess.run(command, capture_output=True, text=True, env=plume_train_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("plume-train: sweep of 2 job(s): 2 completed, 0 refused, 0 failed"
            in done.stderr.splitlines())
    plain = [[*common, *jobs[0]],
             [*(o for o in common if not o.startswith("algo.n_steps=")), *jobs[1]]]
    expected = [Path(OmegaConf.select(compose_cfg(*args, hydra_cfg=True), "hydra.run.dir"))
                for args in plain]
    assert sorted(p.parent for p in root.rglob("status.json")) == sorted(expected)
    for run_dir in expected:
        assert RunDirectory(run_dir).status()["state"] == "completed"
    assert [OmegaConf.load(d / "config.yaml").algo.n_steps for d in expected] == [64, 32]
    # nothing else: the sweep's folder holds its record and the two jobs' folders, one seed each
    assert [p.name for p in root.iterdir()] == ["default"]
    assert sorted(p.name for p in (root / "default").iterdir()) == sorted(
        ["multirun.yaml", *(d.parent.name for d in expected)])
    assert [[p.name for p in d.parent.iterdir()] for d in expected] == [["seed=0"], ["seed=1"]]


PRODUCTS = [
    # keys in first-seen order, the last varying fastest; batches of max_batch_size
    (["a=1,2", "b=x,y,z", "c=3"], 4,
     [[["a=1", "b=x", "c=3"], ["a=1", "b=y", "c=3"], ["a=1", "b=z", "c=3"],
       ["a=2", "b=x", "c=3"]], [["a=2", "b=y", "c=3"], ["a=2", "b=z", "c=3"]]]),
    (["a=1,2", "b=x,y,z", "c=3"], None,
     [[["a=1", "b=x", "c=3"], ["a=1", "b=y", "c=3"], ["a=1", "b=z", "c=3"],
       ["a=2", "b=x", "c=3"], ["a=2", "b=y", "c=3"], ["a=2", "b=z", "c=3"]]]),
    # a later value of a key replaces an earlier one; lists and quoted commas are one value
    (["a=1", "a=2,3", "b=[1,2]", "c='q,r'"], 1,
     [[["a=2", "b=[1,2]", "c='q,r'"]], [["a=3", "b=[1,2]", "c='q,r'"]]]),
    ([], None, [[[]]]),  # no override: one job
]


@pytest.mark.parametrize("args, batch, expected", PRODUCTS)
def test_the_plume_sweeper_expands_a_product_as_hydra_s_basic_sweeper(args, batch, expected):
    """The jobs and batches of Hydra's basic sweeper (its documented order), written out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hydra_plugins.plume_sweeper.plume_sweeper import batches, product_jobs

    overrides = OverridesParser.create().parse_overrides(args)
    assert batches(product_jobs(overrides), batch) == expected


def test_a_jobs_file_lists_runs_not_sweeps(tmp_path):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hydra_plugins.plume_sweeper.plume_sweeper import JobsFileError, listed_jobs, read_jobs

    parser = OverridesParser.create()
    path = tmp_path / "jobs.json"
    for text in ("[[\"seed=0\"]", "[\"seed=0\"]", "[[0]]"):
        path.write_text(text)
        with pytest.raises(JobsFileError, match="hydra.sweeper.jobs="):
            read_jobs(str(path))
    with pytest.raises(JobsFileError, match="not a sweep: seed=0,1"):
        listed_jobs([["seed=0,1"]], [], parser)
    with pytest.raises(JobsFileError, match="sweep override cannot be added"):
        listed_jobs([["seed=0"]], parser.parse_overrides(["sampler=a,b"]), parser)
    given = parser.parse_overrides(["seed=3", "+x=1", "logger=none"])
    assert listed_jobs([["seed=0"], ["logger=wandb"]], given, parser) == [
        ["+x=1", "logger=none", "seed=0"], ["seed=3", "+x=1", "logger=wandb"]]


def test_an_interrupted_job_resumes_from_its_checkpoint(compose_cfg, tmp_path, monkeypatch):
    from plume.harness.training import evaluation

    real_evaluate = evaluation.Evaluator.evaluate

    def evaluate_then_crash_at_the_end(self, policy, **columns):
        if columns["progress"] == 1.0:
            raise KeyboardInterrupt("simulated crash before the last evaluation")
        return real_evaluate(self, policy, **columns)

    cfg = compose_cfg(*TINY, "logger=none")
    monkeypatch.setattr(evaluation.Evaluator, "evaluate", evaluate_then_crash_at_the_end)
    with pytest.raises(KeyboardInterrupt):
        run_job(cfg, tmp_path)
    run = RunDirectory(tmp_path)
    assert run.status()["state"] == "failed"
    assert run.load_checkpoint()["progress"] == 0.5
    assert list(run.read_train()["env_steps"]) == [512, 1024, 1536, 2048]

    monkeypatch.setattr(evaluation.Evaluator, "evaluate", real_evaluate)
    run_job(cfg, tmp_path)
    assert run.status()["state"] == "completed"
    # The two updates after the checkpoint were redone, not appended twice.
    assert list(run.read_train()["env_steps"]) == [512, 1024, 1536, 2048]
    evals = run.read_table("eval.parquet")
    assert evals.groupby("progress").size().to_dict() == {0.0: 1000, 0.5: 1000, 1.0: 1000}
    assert run.load_checkpoint()["env_steps"] == 2048


def test_a_checkpoint_of_another_configuration_is_not_resumed(compose_cfg, tmp_path):
    run_job(compose_cfg(*TINY, "logger=none"), tmp_path)
    run = RunDirectory(tmp_path)
    run.write_status("failed", error="pretend it crashed")
    run_job(compose_cfg(*TINY, "logger=none", "algo.learning_rate=1e-3"), tmp_path)
    assert run.status()["state"] == "completed"
    assert run.load_checkpoint()["agent"]["config"]["learning_rate"] == 1e-3


def test_a_long_override_list_still_makes_a_valid_folder_name():
    from plume.harness.config.configdir import override_dirname as _override_dirname

    overrides = ",".join(f"sampler.param_{i}=value_{i}" for i in range(40))
    name = _override_dirname(overrides)
    assert len(name.encode()) <= 200 and name.startswith("sampler.param_0=value_0")
    assert name != _override_dirname(overrides.replace("value_39", "value_x"))
    assert _override_dirname("") == "defaults" and _override_dirname("a=b/c") == "a=b_c"


def test_evaluations_fall_on_distinct_env_steps_and_the_eta_is_never_negative(compose_cfg,
                                                                            tmp_path):
    from plume.harness.training.progress import format_clock

    # updates of 8 x 64 = 512 steps, evaluation points every 256: every other one is passed
    run_job(compose_cfg(*TINY, "logger=none", "train.eval_points=8"), tmp_path)
    evals = RunDirectory(tmp_path).read_table("eval.parquet")
    steps = evals.groupby("progress")["env_steps"].first()
    assert list(steps) == [0, 512, 1024, 1536, 2048] and steps.is_unique
    # each evaluation keeps the label of the point it was due at; the last one is 1.0
    assert list(steps.index) == [0.0, 0.125, 0.375, 0.625, 1.0]
    assert format_clock(-8.0) == "0:00:00" and format_clock(3725.0) == "1:02:05"
