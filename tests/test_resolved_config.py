"""One resolved configuration per job, and the same one as before.

For every command below, tests/data/resolved_configs.json holds what the apps produced when it
was recorded: the run folder Hydra names (``<root>/<experiment>/<overrides>/seed=<seed>``),
the choices in ``status.json``, the run fingerprint (checkpoints and resumes match on it), the
composed config (``.hydra/config.yaml``) and the resolved one (``config.yaml``, also W&B's
config). The first recording was made from the code before the schema resolved jobs itself
(``resolve_*`` writing into the composed config, ``train.config_fingerprint``), so these tests
hold the schema's resolution to it, byte for byte, and the real apps too (subprocesses).

Re-record after a deliberate change of ``conf/`` (and say why in the change):
``python -m tests.test_resolved_config``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import compose_job, plume_train_env

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "resolved_configs.json"
# paths.cache reads $XDG_CACHE_HOME: a fixed relative value keeps the recording independent of
# the machine (and lets a subprocess run write its cache inside its own working directory)
CACHE_HOME = "golden-cache"

# A tiny training job (two updates, evaluations at 0, 0.5 and 1): the end-to-end runs below.
TINY_ABR = ("env=abr", "train.total_steps=128", "train.eval_points=2", "env.n_envs=4",
            "algo.n_steps=16", "algo.hidden_sizes=[16]", "analysis.k_range=[2,3]",
            "analysis.selection.k_end=3", "train.progress_every_s=0", "logger=none")

TRAIN = [
    (),
    ("env=tracebench", "env.dataset=majority_fast", "algo=ppo", "sampler=plume_dynamic", "seed=0",
     "train.total_steps=200000", "train.eval_points=20", "env.n_envs=64", "logger=wandb",
     "logger.mode=offline", "paths.root=runs"),
    ("env=abr",),
    ("env=abr", "env.variant=pensieve"),
    ("env=abr", "env.variant=gelato", "algo=a2c_gelato_quick", "sampler=plume_static", "seed=3"),
    ("env=abr", "env.variant=pensieve", "algo=a2c_pensieve_quick", "sampler=genet",
     "train.total_steps=600000"),
    ("env=abr", "algo=ppo_abr", "sampler=plr"),
    ("env=abr", "algo=dqn_gelato", "sampler=trace_error"),
    ("env=abr", "env.variant=pensieve", "env.dataset=pensieve_synthetic", "algo.ent_coef=2.0"),
    ("env=abr", "env.variant=pensieve", "algo.n_steps=8", "algo.hidden_sizes=[64]",
     "train.validation=0.2"),
    ("env=cc",),
    ("env=cc", "algo=ppo", "sampler=tscl", "seed=1"),
    ("env=cc", "algo=auto", "algo.gamma=0.99", "analysis=all_features"),
    ("env=lb",),
    ("env=lb", "algo=ppo_lb_quick", "sampler=cl2", "train.total_steps=300000"),
    ("algo=a2c", "sampler=worst_case"),
    ("algo=dqn", "sampler=plr"),
    ("algo=dqn_per", "sampler=two_class", "analysis=kmeans"),
    ("sampler=plume_dynamic", "sampler.alpha=0.7", "sampler.recompute_every=${train.total_steps}",
     "train.total_steps=100000"),
    ("sampler=genet", "sampler.budget_steps=${train.eval_points}", "seed=2"),
    ("sampler=cluster_uniform", "train.validation=0.1", "train.stop_at=0.5"),
    ("experiment=fig6a_quick", "sampler=plume_static"),
    ("experiment=fig9_quick", "sampler=plume_dynamic", "seed=2"),
    ("experiment=fig8_dqn_quick", "sampler=plr"),
    ("exp_name=mine", "paths.root=elsewhere", "logger=none", "overwrite=true", "seed=7",
     "train.torch_threads=2"),
    ("train.total_steps=2048", "train.eval_points=2", "train.progress_every_s=0", "env.n_envs=8",
     "env.test_sets=[majority_slow]", "algo.n_steps=64", "algo.hidden_sizes=[32,32]"),
    (*TINY_ABR, "train.stop_at=0.5"),
    TINY_ABR,
]
EVAL = [
    (),
    ("env=abr", "controller=bba"),
    ("env=abr", "env.variant=pensieve", "controller=robust_mpc", "env.test_sets=[pensieve_synthetic]"),
    ("env=cc", "controller=aimd"),
    ("env=lb", "controller=least_work_left", "exp_name=refs"),
]
CASES = [("train", c) for c in TRAIN] + [("eval", c) for c in EVAL]


def _choices(hydra_node) -> dict[str, str]:
    """The config-group choices plume-train records (``train_job``): Hydra's own left out."""
    return {group: choice for group, choice in hydra_node.runtime.choices.items()
            if not group.startswith("hydra") and choice is not None}


def record(app: str, overrides: tuple[str, ...]) -> dict:
    """What the app makes of ``<app> OVERRIDES``: run folder, choices, fingerprint, configs."""
    return _resolve(app, overrides)[0]


def _resolve(app: str, overrides: tuple[str, ...]):
    """``(record, ResolvedJob)`` of ``<app> OVERRIDES``, composed as the app composes it."""
    from plume.harness.config.preflight import check_controller
    from plume.harness.config.schema import resolve_eval, resolve_job, validate

    cfg, hydra_node = compose_job(app, *overrides)
    run_dir = str(hydra_node.run.dir)
    assert run_dir == f"{hydra_node.sweep.dir}/{hydra_node.sweep.subdir}"  # -m: the same folder
    composed = OmegaConf.to_yaml(cfg)
    if app == "train":
        resolved = resolve_job(cfg, validate(cfg), _choices(hydra_node))
    else:
        env, spec, _, controller = check_controller(cfg)
        resolved = resolve_eval(cfg, env, spec, controller)
    assert OmegaConf.to_yaml(cfg) == composed  # the composed config is read, never written
    return {"app": app, "overrides": list(overrides), "run_dir": run_dir,
            "choices": resolved.choices, "fingerprint": resolved.fingerprint,
            "composed_yaml": composed, "config_yaml": resolved.yaml}, resolved


def _golden() -> dict[tuple[str, tuple[str, ...]], dict]:
    return {(r["app"], tuple(r["overrides"])): r for r in json.loads(GOLDEN.read_text())}


@pytest.fixture(autouse=True)
def _cache_home(monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", CACHE_HOME)


def test_the_recording_covers_every_command():
    assert sorted(_golden()) == sorted(CASES)


@pytest.mark.parametrize("app,overrides", CASES, ids=lambda v: " ".join(v) or "defaults"
                         if isinstance(v, tuple) else v)
def test_a_job_resolves_as_recorded(app, overrides):
    expected = _golden()[(app, overrides)]
    found, resolved = _resolve(app, overrides)
    assert found == expected
    # W&B's config is config.yaml's content, and a copy: the tracker cannot change the record
    assert resolved.wandb_config == OmegaConf.to_container(OmegaConf.create(resolved.yaml))
    assert resolved.wandb_config == resolved.config and resolved.wandb_config is not resolved.config


def test_algo_auto_composes_every_key_of_every_algorithm_unset():
    """``algo.<key>=<value>`` composes without ``+`` for any key any preset may take."""
    from dataclasses import fields

    from plume.agents import ALGORITHMS
    from plume.harness.config.schema import AUTO

    algo = compose_job("train")[0].algo
    keys = [f.name for a in ALGORITHMS.values() for f in fields(a.CONFIG)]
    assert algo.name == AUTO and list(algo) == ["name", *dict.fromkeys(keys)]
    assert all(OmegaConf.is_missing(algo, key) for key in keys)


def test_a_preset_that_does_not_compose_is_one_line(tmp_path):
    """A preset whose defaults list Hydra cannot follow is refused naming it (no traceback)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from plume.harness.config.schema import ConfigError, load_algo_preset

    (tmp_path / "algo").mkdir()
    (tmp_path / "algo" / "broken.yaml").write_text("defaults:\n  - nowhere\n  - _self_\n")
    GlobalHydra.instance().clear()
    with (initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"),
          pytest.raises(ConfigError, match=r"^algo preset 'broken' \(env 'x''s default\) "
                                           r"does not compose: .*nowhere")):
        load_algo_preset("broken", "x")


def _run(app: str, overrides: tuple[str, ...], cwd: Path) -> Path:
    """``plume-<app> OVERRIDES`` in ``cwd`` (its paths.root ``runs`` and analysis cache there);
    the run folder the recording names for it, checked to exist."""
    import subprocess

    module = {"train": "plume.harness.apps.train", "eval": "plume.harness.apps.evaluate"}[app]
    env = {**plume_train_env(), "XDG_CACHE_HOME": CACHE_HOME,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", module, *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    run = cwd / _golden()[(app, overrides)]["run_dir"]
    assert run.is_dir(), sorted(p.relative_to(cwd) for p in cwd.glob("runs/*/*"))
    return run


def _recorded_as(run: Path, app: str, overrides: tuple[str, ...]) -> dict:
    """The run's status, after checking its config.yaml and choices against the recording."""
    expected = _golden()[(app, overrides)]
    status = json.loads((run / "status.json").read_text())
    assert (run / "config.yaml").read_text() == expected["config_yaml"]
    assert status["choices"] == expected["choices"]
    return status


def _fingerprint(run: Path) -> str:
    from plume.runs.store import RunDirectory

    return RunDirectory(run).load_checkpoint()["fingerprint"]


def test_plume_train_records_resumes_and_skips_as_recorded(tmp_path):
    """env=abr (algo=auto: Gelato's A2C) paused at half its budget, resumed by the command
    without train.stop_at (same folder, same fingerprint), then skipped as completed."""
    paused = (*TINY_ABR, "train.stop_at=0.5")
    run = _run("train", paused, tmp_path)
    assert _recorded_as(run, "train", paused)["state"] == "paused"
    assert _fingerprint(run) == _golden()[("train", paused)]["fingerprint"]

    assert _run("train", TINY_ABR, tmp_path) == run
    status = _recorded_as(run, "train", TINY_ABR)
    assert status["state"] == "completed" and len(status["resumes"]) == 1
    assert status["resumes"][0]["from_env_steps"] == 64
    assert _fingerprint(run) == _golden()[("train", TINY_ABR)]["fingerprint"]

    _run("train", TINY_ABR, tmp_path)  # completed: skipped, its record untouched
    assert json.loads((run / "status.json").read_text()) == status


def test_plume_eval_records_as_recorded(tmp_path):
    overrides = ("env=abr", "controller=bba")
    run = _run("eval", overrides, tmp_path)
    assert _recorded_as(run, "eval", overrides)["state"] == "completed"


def main() -> None:
    """Re-record tests/data/resolved_configs.json from the code as it is."""
    os.environ["XDG_CACHE_HOME"] = CACHE_HOME
    records = [record(app, overrides) for app, overrides in CASES]
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(records, indent=1) + "\n")
    print(f"{GOLDEN}: {len(records)} commands", file=sys.stderr)


if __name__ == "__main__":
    main()
