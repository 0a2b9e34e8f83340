"""Shared fixtures: compose the real Hydra config and shrink it for tests."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

# Tiny budgets: a job trains a few thousand steps and evaluates on one test set.
TINY = [
    "train.total_steps=2048",
    "train.eval_points=2",
    "train.progress_every_s=0",
    "env.n_envs=8",
    "env.test_sets=[majority_slow]",
    "algo.n_steps=64",
    "algo.hidden_sizes=[32,32]",
    # Stage 1-2 runs for every job; one cache for the whole test session keeps that cheap.
    f"paths.cache={Path(tempfile.gettempdir()) / 'plume-tests' / 'analysis-cache'}",
]


@pytest.fixture(autouse=True)
def _wandb_sandbox(tmp_path_factory, monkeypatch):
    """W&B writes its settings and caches into a temp dir and never goes online."""
    home = tmp_path_factory.mktemp("wandb_home")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(home / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(home / "data"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)


@pytest.fixture
def compose_cfg():
    """compose_cfg(*overrides) -> the job config Hydra would build for plume-train."""
    import plume.harness.train  # noqa: F401  (registers the plume_dirname resolver)

    def _compose(*overrides: str, hydra_cfg: bool = False):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose("train", overrides=list(overrides), return_hydra_config=hydra_cfg)

    yield _compose
    GlobalHydra.instance().clear()


@pytest.fixture
def compose_cfg_analyze():
    """compose_cfg_analyze(*overrides) -> the config of plume-analyze."""
    import plume.harness.train  # noqa: F401  (registers the plume_dirname resolver)

    def _compose(*overrides: str):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose("analyze", overrides=list(overrides))

    yield _compose
    GlobalHydra.instance().clear()


def conf_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def plume_train_env() -> dict[str, str]:
    """Environment for plume-train subprocesses: one thread, no network for W&B."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_SILENT="true")
    return env
