"""Hyperparameter search (``hydra/sweeper=plume_optuna``, ``plume.harness.integrations.tune``): a tiny study
through the joblib launcher, a study that never reads a test set, a study killed and resumed,
and the pieces: the search space's checks, the validation split, ``train.stop_at``'s pause and
exact resume, and a paused run counted nowhere as completed."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from omegaconf import OmegaConf

from plume.harness.apps.train import run_job
from plume.harness.config.datasets import VALIDATION, validation_split
from plume.harness.config.errors import ConfigError
from plume.harness.integrations.tune import check_trial_job, search_space
from plume.runs.store import RunDirectory
from plume.traces import TraceSet, load_tracebench
from tests.conftest import CONF_DIR, TINY, conf_options, plume_train_env

pytestmark = pytest.mark.filterwarnings(
    "ignore:(?s).*is validated against ConfigStore schema:UserWarning")
ROOT = CONF_DIR.parent
# Random sampler, seed 4: the first three trials draw learning rate 3e-3 (PPO learns a good
# policy within 1,024 steps: 5.52 QoE per chunk), the fourth 1e-7 (its policy stays where it
# started, about 1.0): the median pruner, with no startup trial, prunes it at rung 0.5. The
# objective is mean_minus_std, recomputed by hand below.
SEARCH = """\
# @package _global_
defaults:
  - override /hydra/sweeper: plume_optuna
train:
  total_steps: 2048
  eval_points: 2
  validation: 0.02
hydra:
  sweeper:
    sampler: random
    sampler_seed: 4
    n_startup_trials: 0
    n_trials: 4
    n_jobs: 2
    seeds: 2
    objective: mean_minus_std
    rungs: [0.5, 1.0]
    params:
      algo.learning_rate: {type: categorical, choices: [3.0e-3, 1.0e-7]}
      algo.ent_coef: {type: float, low: 0.0, high: 0.02}
"""
JOB = ["logger=none", "env.n_envs=8", "algo.n_steps=32", "algo.hidden_sizes=[16,16]",
       "algo.n_epochs=1", "algo.n_minibatches=2",
       "analysis.restarts=2", "analysis.selection.steps=1",
       next(o for o in TINY if o.startswith("paths.cache="))]


def search_command(tmp: Path, *extra: str, launcher: str = "joblib") -> list[str]:
    """``plume-train -m hparams_search=tiny`` (on the joblib launcher, 2 workers, or Hydra's
    basic one), runs under ``tmp/runs``, with a test set that is a file of garbage (a study
    must never read it)."""
    (tmp / "conf" / "hparams_search").mkdir(parents=True, exist_ok=True)
    (tmp / "conf" / "hparams_search" / "tiny.yaml").write_text(SEARCH)
    (tmp / "garbage.npz").write_bytes(b"not an archive\x00" * 64)
    return [sys.executable, "-m", "plume.harness.apps.train", "-m", "hparams_search=tiny",
            f"hydra.searchpath=[file://{tmp / 'conf'}]", f"hydra/launcher={launcher}",
            *(["hydra.launcher.n_jobs=2"] if launcher == "joblib" else []),
            "exp_name=tune", f"paths.root={tmp / 'runs'}",
            f"env.test_sets=[{tmp / 'garbage.npz'}]", *JOB, *extra]


def load(sweep_dir: Path) -> optuna.Study:
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(sweep_dir / "optuna.journal")))
    return optuna.load_study(study_name="tune", storage=storage)


def recomputed(run_dirs: list[str], rung: float) -> float:
    """The trial's value by hand: per run, the mean validation score at its last evaluation at
    or before ``rung``; then their mean minus their sample standard deviation."""
    values = []
    for run_dir in run_dirs:
        frame = pd.read_parquet(Path(run_dir) / "eval.parquet")
        frame = frame[(frame["test_set"] == VALIDATION) & (frame["progress"] <= rung)]
        values.append(frame[frame["progress"] == frame["progress"].max()]["score"].mean())
    return float(np.mean(values) - np.std(values, ddof=1))


def finished_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return study.get_trials(states=states)


def assert_values_recomputed(study: optuna.Study) -> None:
    for trial in finished_trials(study):
        rung = 1.0 if trial.state == optuna.trial.TrialState.COMPLETE else 0.5
        value = trial.value if rung == 1.0 else trial.intermediate_values[1024]
        assert value == pytest.approx(recomputed(trial.user_attrs["run_dirs"], rung), abs=1e-12)


@pytest.fixture(scope="module")
def study_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tune")
    done = subprocess.run(search_command(tmp), capture_output=True, text=True,
                          env=plume_train_env(), cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp, done


def test_a_tiny_study_prunes_and_writes_its_outputs(study_run, compose_cfg):
    tmp, done = study_run
    sweep_dir = tmp / "runs" / "tune"
    study = load(sweep_dir)
    pruned = study.get_trials(states=(optuna.trial.TrialState.PRUNED,))
    assert len(finished_trials(study)) == 4 and len(pruned) >= 1
    assert re.search(r"^trial \d: pruned at rung 0\.5 \(value [-\d.]+ < median [-\d.]+\)$",
                     done.stdout, re.M)
    assert re.search(r"^trial \d: [-\d.]+ \(best so far\)$", done.stdout, re.M)
    assert_values_recomputed(study)

    table = pd.read_csv(sweep_dir / "study" / "trials.csv")
    assert list(table["number"]) == [t.number for t in study.trials]
    for row, trial in zip(table.to_dict("records"), study.trials):
        assert row["state"] == trial.state.name
        assert row["algo.learning_rate"] == trial.params["algo.learning_rate"]
        expected = recomputed(trial.user_attrs["run_dirs"], 0.5)
        assert row["rung_0.5"] == pytest.approx(expected, abs=1e-12)
        seeds = [float(v) for v in row["seeds_0.5"].split(";")]
        assert len(seeds) == 2
        assert np.mean(seeds) - np.std(seeds, ddof=1) == pytest.approx(expected, abs=1e-5)
        assert row["run_dirs"].split(";") == trial.user_attrs["run_dirs"]
    for stem in ("history", "importance"):
        for suffix in (".png", ".pdf"):
            assert (sweep_dir / "study" / f"{stem}{suffix}").stat().st_size > 0

    best = study.best_trial
    conf = tmp / "best_conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "algo").mkdir(parents=True)
    (conf / "experiment" / "best.yaml").write_text((sweep_dir / "study" / "best.yaml").read_text())
    (conf / "algo" / "best.yaml").write_text((sweep_dir / "study" / "best_algo.yaml").read_text())
    text = (conf / "experiment" / "best.yaml").read_text()
    assert text.startswith("# @package _global_\n") and f"trial {best.number}" in text
    for choice in ("experiment=best", "algo=best"):  # plume-train composes and accepts both
        cfg = compose_cfg(f"hydra.searchpath=[file://{conf}]", choice, *TINY)
        for key, value in best.params.items():
            assert OmegaConf.select(cfg, key) == value
        check_trial_job(OmegaConf.merge(cfg, {"train": {"validation": 0.02}}), [0.5, 1.0])
    assert compose_cfg(f"hydra.searchpath=[file://{conf}]", "algo=best").algo.name == "ppo"


def test_a_study_never_reads_a_test_set(study_run):
    tmp, done = study_run
    train = load_tracebench("majority_fast", "train")
    kept, held_out = validation_split(train, 0.02)
    run_dirs = sorted(p.parent for p in (tmp / "runs" / "tune").rglob("eval.parquet"))
    assert len(run_dirs) >= 4
    for run_dir in run_dirs:
        frame = pd.read_parquet(run_dir / "eval.parquet")
        assert set(frame["test_set"]) == {VALIDATION}
        ids = set(frame["trace_id"])
        assert ids == set(held_out.trace_ids) and ids <= set(train.trace_ids)
        assert not ids & set(kept.trace_ids)
        assert OmegaConf.load(run_dir / "config.yaml").env.test_sets == []
    assert "env.test_sets is ignored, no test set is read" in done.stdout + done.stderr


def _watch(process: subprocess.Popen, lines: list[str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")),
                              daemon=True)
    thread.start()
    return thread


def test_a_killed_study_resumes_with_the_same_trials_and_run_directories(tmp_path):
    # One trial at a time, killed while the second one's jobs train to rung 0.5. Hydra's basic
    # launcher runs the jobs in the sweeper's process (the kill stops them mid-way too) and
    # spares two pools of worker processes the test's time.
    command = search_command(tmp_path, "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1",
                             launcher="basic")
    sweep_dir = tmp_path / "runs" / "tune"
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True, env=plume_train_env(), cwd=ROOT, start_new_session=True)
    lines: list[str] = []
    _watch(job, lines)

    def midway() -> list[Path]:  # a job of the second batch paused or running at rung 0.5
        return [p.parent for p in sweep_dir.rglob("status.json")
                if json.loads(p.read_text() or "{}").get("state") in ("paused", "running")]

    deadline = time.time() + 300
    while not (any(re.match(r"trial \d: [-\d.]+ \(", line) for line in lines) and midway()):
        assert time.time() < deadline and job.poll() is None, "".join(lines)[-3000:]
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=60)
    before = load(sweep_dir)
    running = before.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    complete = before.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert running and complete
    stamps = {d: (Path(d) / "status.json").read_bytes()
              for t in complete for d in t.user_attrs["run_dirs"]}

    again = subprocess.run(command, capture_output=True, text=True, env=plume_train_env(),
                           cwd=ROOT, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "of a killed sweep failed and asked again" in again.stdout
    study = load(sweep_dir)
    assert len(finished_trials(study)) == 2
    failed = study.get_trials(states=(optuna.trial.TrialState.FAIL,))
    assert sorted(t.number for t in failed) == sorted(t.number for t in running)
    asked_again = [t for t in finished_trials(study) if t.number > max(t.number for t in failed)]
    assert sorted(map(str, (t.params for t in asked_again))) == sorted(
        map(str, (t.params for t in running)))
    for trial in asked_again:  # the same values: the same run directories
        assert trial.user_attrs["run_dirs"] == next(
            t.user_attrs["run_dirs"] for t in running if t.params == trial.params)
    assert_values_recomputed(study)
    for run_dir, stamp in stamps.items():  # completed before the kill: not launched again
        assert (Path(run_dir) / "status.json").read_bytes() == stamp


# --- the pieces -----------------------------------------------------------------------------


@pytest.mark.parametrize("params, key, words", [
    ({}, "hydra.sweeper.params", "empty"),
    ({"algo.gamma": [0.9, 0.99]}, "hydra.sweeper.params.algo.gamma", "expected {type"),
    ({"algo.gamma": {"type": "choice", "choices": [0.9]}}, "hydra.sweeper.params.algo.gamma",
     "float|int|categorical"),
    ({"algo.gamma": {"type": "categorical", "choices": []}},
     "hydra.sweeper.params.algo.gamma.choices", "non-empty"),
    ({"algo.learning_rate": {"type": "float", "low": 1e-3, "high": 1e-5}},
     "hydra.sweeper.params.algo.learning_rate", "must be below high"),
    ({"algo.learning_rate": {"type": "float", "low": 0.0, "high": 1e-2, "log": True}},
     "hydra.sweeper.params.algo.learning_rate", "log scale needs low > 0"),
    ({"algo.n_steps": {"type": "int", "low": 8, "high": 64.5}},
     "hydra.sweeper.params.algo.n_steps.high", "an integer"),
    ({"algo.n_steps": {"type": "int", "low": 8, "high": 64, "choices": [8]}},
     "hydra.sweeper.params.algo.n_steps", "no field(s) choices"),
])
def test_a_bad_search_space_is_one_line_naming_its_key(params, key, words):
    with pytest.raises(ConfigError) as err:
        search_space(params)
    message = str(err.value)
    assert message.startswith(key) and words in message and "\n" not in message


SETTINGS = {"direction": "maximize", "sampler": "tpe", "pruner": "median", "n_trials": 20,
            "n_jobs": 2, "seeds": 2, "n_startup_trials": 5, "warmup_rungs": 0,
            "reduction_factor": 2, "rungs": [0.25, 0.5, 1.0], "objective": "mean"}


@pytest.mark.parametrize("objective, direction, expected", [
    ("mean", "maximize", 1.0), ("mean", "minimize", 1.0),
    ("worst", "maximize", 0.0), ("worst", "minimize", 2.0),
    # sample SD of 2, 0, 1: sqrt(((1)^2 + (-1)^2 + 0^2) / 2) = 1
    ("mean_minus_std", "maximize", 0.0), ("mean_minus_std", "minimize", 2.0),
])
def test_a_trials_value_combines_its_seeds_by_the_objective(objective, direction, expected):
    from plume.harness.integrations.tune import seed_objective

    assert seed_objective([2.0, 0.0, 1.0], objective, direction) == expected


@pytest.mark.parametrize("change, message", [
    ({"rungs": [0.5, 0.25, 1.0]}, "hydra.sweeper.rungs=[0.5, 0.25, 1.0]: expected increasing"),
    ({"rungs": [0.25, 0.5]}, "hydra.sweeper.rungs=[0.25, 0.5]: expected increasing"),
    ({"pruner": "hyperband"}, "hydra.sweeper.pruner='hyperband': valid choices: median, "),
    ({"seeds": 0}, "hydra.sweeper.seeds must be an integer >= 1, got 0"),
    ({"objective": "median"}, "hydra.sweeper.objective='median': valid choices: mean, worst, "),
    ({"objective": "mean_minus_std", "seeds": 1},
     "hydra.sweeper.objective=mean_minus_std needs hydra.sweeper.seeds >= 2"),
])
def test_bad_sweeper_settings_are_one_line_naming_the_key(change, message):
    from plume.harness.integrations.tune import check_settings

    assert check_settings(SETTINGS) == [0.25, 0.5, 1.0]
    with pytest.raises(ConfigError) as err:
        check_settings({**SETTINGS, **change})
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_search_refuses_rungs_off_the_evaluation_points_and_a_test_set_objective(
        compose_cfg):
    cfg = compose_cfg(*TINY, "train.validation=0.02")
    check_trial_job(cfg, [0.5, 1.0])
    with pytest.raises(ConfigError, match=r"^hydra.sweeper.rungs: 0.3 is not an evaluation "
                                          r"point of train.eval_points=2"):
        check_trial_job(cfg, [0.3, 1.0])
    with pytest.raises(ConfigError, match=r"^train.validation=0: the objective is a "
                                          r"validation score: set train.validation, e.g. 0.2$"):
        check_trial_job(compose_cfg(*TINY), [0.5, 1.0])


def test_a_search_without_validation_is_refused_before_anything_runs(tmp_path):
    done = subprocess.run(search_command(tmp_path, "train.validation=0"), capture_output=True,
                          text=True, env={**plume_train_env(), "PYTHONWARNINGS": "ignore"},
                          cwd=ROOT, timeout=300)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        ("plume-train: error: train.validation=0: the objective is a validation score: set "
         "train.validation, e.g. 0.2")]
    assert not (tmp_path / "runs").exists()


def test_the_validation_split_holds_out_the_smallest_sha256_ids():
    ids = [f"trace-{c}" for c in "abcdefghij"]
    traces = TraceSet("hand", series={"bandwidth": np.ones((10, 4))}, trace_ids=ids)
    by_hash = sorted(ids, key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    train, held_out = validation_split(traces, 0.3)
    assert list(held_out.trace_ids) == [i for i in ids if i in by_hash[:3]]  # the traces' order
    assert list(train.trace_ids) == [i for i in ids if i not in by_hash[:3]]
    shuffled = traces.subset([9, 3, 0, 5, 1, 8, 2, 7, 6, 4])  # any order: the same traces
    assert set(validation_split(shuffled, 0.3)[1].trace_ids) == set(by_hash[:3])
    assert list(validation_split(traces, 0.01)[1].trace_ids) == [by_hash[0]]  # at least one
    with pytest.raises(ConfigError, match=r"^train.validation=0.96: holding out 10 of the 10 "):
        validation_split(traces, 0.96)


def test_stop_at_pauses_and_a_larger_one_resumes_exactly(compose_cfg, tmp_path):
    from experiments.runner import PlannedJob
    from plume.report.runs import load_scores, scan_runs

    base = [*(o for o in TINY if not o.startswith(("algo.", "train."))), "logger=none",
            "train.total_steps=2048", "train.eval_points=4", "train.progress_every_s=0",
            "algo.n_steps=32", "algo.hidden_sizes=[16,16]"]
    run_job(compose_cfg(*base), tmp_path / "whole")
    paused = tmp_path / "paused"
    summary = run_job(compose_cfg(*base, "train.stop_at=0.5"), paused)
    status = RunDirectory(paused).status()
    assert summary["paused_at"] == 0.5 and status["state"] == "paused"
    assert sorted(pd.read_parquet(paused / "eval.parquet")["progress"].unique()) == [0, 0.25, 0.5]
    inventory = scan_runs([tmp_path])  # a paused run is listed, never pooled
    assert list(inventory.completed["run_dir"]) == [str(tmp_path / "whole")]
    assert set(load_scores(inventory)["run_dir"]) == {str(tmp_path / "whole")}
    assert not PlannedJob(job=None, args=[], run_dir=paused, state=status["state"]).completed
    assert run_job(compose_cfg(*base, "train.stop_at=0.25"), paused)["paused_at"] == 0.5

    run_job(compose_cfg(*base, "train.stop_at=1.0"), paused)
    assert RunDirectory(paused).status()["state"] == "completed"
    assert ((paused / "eval.parquet").read_bytes()
            == (tmp_path / "whole" / "eval.parquet").read_bytes())

    def curve(run_dir: Path) -> list[dict]:  # wall-clock fields aside
        return [{k: v for k, v in json.loads(line).items()
                 if k != "time_s" and not k.startswith("perf/")}
                for line in (run_dir / "train.jsonl").read_text().splitlines()]

    assert curve(paused) == curve(tmp_path / "whole")
    assert [r["from_env_steps"] for r in RunDirectory(paused).status()["resumes"]] == [1024,
                                                                                       1024]


def test_best_files_compose_with_a_group_choice_and_a_list_value(compose_cfg, tmp_path):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from plume.harness.integrations.tune import best_config, citation

    space = search_space({
        "sampler": {"type": "categorical", "choices": ["uniform", "plume_static"]},
        "algo.hidden_sizes": {"type": "categorical", "choices": ["[16,16]", "[32]"]},
        "algo.n_steps": {"type": "int", "low": 16, "high": 64, "step": 16},
        "algo.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-2, "log": True}})
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=1))
    trial = study.ask()
    values = {key: param.suggest(trial) for key, param in space.items()}
    trial.set_user_attr("seeds", 2)
    study.tell(trial, 1.5)
    parser = OverridesParser.create()
    text = best_config(study.best_trial, space, lambda o: parser.parse_override(o).value(),
                       {"sampler"}, citation(study, "memory", study.best_trial, "_global_"))
    assert text.startswith("# @package _global_\n# Best trial of the Optuna study")
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "best.yaml").write_text(text)
    cfg = compose_cfg(f"hydra.searchpath=[file://{tmp_path}]", "experiment=best",
                      hydra_cfg=True)
    assert cfg.hydra.runtime.choices.sampler == values["sampler"]
    assert list(cfg.algo.hidden_sizes) == OmegaConf.create(
        f"x: {values['algo.hidden_sizes']}").x
    assert (cfg.algo.n_steps, cfg.algo.learning_rate) == (values["algo.n_steps"],
                                                          values["algo.learning_rate"])


@pytest.mark.parametrize("name", conf_options("hparams_search"))
def test_every_shipped_search_is_valid_at_every_choice_and_both_ends_of_each_range(
        compose_cfg, name):
    """A search file whose settings, space or any trial's job would be refused fails here, not
    after hours of trials: its first trial's job passes every check of a trial, and every
    categorical choice and both ends of every range compose a valid job."""
    from plume.harness.config.schema import validate
    from plume.harness.integrations.tune import check_settings

    sweeper = OmegaConf.to_container(
        compose_cfg(f"hparams_search={name}", hydra_cfg=True).hydra.sweeper, resolve=True)
    rungs = check_settings(sweeper)
    space = search_space(sweeper["params"])
    probes = {key: param.probe() for key, param in space.items()}
    cfg = compose_cfg(f"hparams_search={name}",
                      *(param.override(probes[key]) for key, param in space.items()))
    assert check_trial_job(cfg, rungs).job.train.validation > 0
    for key, param in space.items():
        assert key.startswith("algo.")  # the shipped searches tune learners only
        ends = param.choices if param.type == "categorical" else (param.low, param.high)
        for value in ends:
            changed = OmegaConf.merge(cfg, OmegaConf.from_dotlist([param.override(value)]))
            assert getattr(validate(changed).algo, key.removeprefix("algo.")) == value
