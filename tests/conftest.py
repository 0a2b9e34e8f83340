"""Shared fixtures: compose the real Hydra config and shrink it for tests.

The floating-point path is pinned here, before numpy or torch is imported, so that the tests
that compare runs bit for bit with recorded references (and the learning tests' fixed seeds)
give the same numbers on every x86-64 machine with AVX2, whatever else it has: numpy, torch
(ATen), oneDNN and MKL each pick their kernels by the CPU they find, and an AVX-512 kernel of
``np.log`` or an Intel-only MKL path rounds differently from the AVX2 one (a reference
recorded on an AVX-512 Xeon failed on an AVX2 EPYC). ``PLUME_TEST_FP`` chooses the setting
(``avx2``, the default, or ``baseline``: SSE4.2-level kernels); one thread everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

# numpy names its dispatch targets X86_V3/X86_V4 from 2.4 on, AVX512F/AVX512_SKX... before;
# unknown names are ignored, so both spellings are listed.
_NUMPY_AVX512 = ("X86_V4 AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX "
                 "AVX512_CNL AVX512_ICL AVX512_SPR")
FP_SETTINGS = {
    "avx2": {"NPY_DISABLE_CPU_FEATURES": _NUMPY_AVX512, "ATEN_CPU_CAPABILITY": "avx2",
             "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"},
    "baseline": {"NPY_DISABLE_CPU_FEATURES": f"X86_V3 AVX2 FMA3 AVX F16C {_NUMPY_AVX512}",
                 "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                 "MKL_CBWR": "COMPATIBLE"},
}
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def fp_environment(setting: str) -> dict[str, str]:
    """The variables that pin the floating-point path ``setting`` (one of FP_SETTINGS)."""
    return {**FP_SETTINGS[setting], **ONE_THREAD}


_PINNED = fp_environment(os.environ.get("PLUME_TEST_FP", "avx2"))
if any(os.environ.get(k) != v for k, v in _PINNED.items()):  # imported as tests.conftest too
    if "numpy" in sys.modules or "torch" in sys.modules:  # too late to pin: say so, loudly
        raise RuntimeError("tests/conftest.py must be imported before numpy and torch")
    os.environ.update(_PINNED)

import absl.logging
import pytest
from hydra import compose
from hydra.core.global_hydra import GlobalHydra

from plume.harness.config.configdir import plume_hydra

# rliable imports absl, whose logging handler keeps the sys.stderr of the moment absl is first
# imported: under pytest, a capture stream. A Hydra app run in this process reconfigures
# logging, which closes every existing handler, and absl's closes its stream unless it is
# sys.stderr at that moment: pytest's capture stream, closed, takes pytest's stderr with it.
# The process's own stderr is never closed.
absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__

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


def compose_config(config_name: str, *overrides: str, return_hydra_config: bool = False):
    """The config Hydra would build for the app ``config_name`` (``train``, ``analyze``, ...)
    with ``overrides`` (usable from module fixtures, where the function-scoped
    ``compose_cfg`` is not); with its ``hydra`` node if ``return_hydra_config``."""
    GlobalHydra.instance().clear()
    try:
        with plume_hydra():
            return compose(config_name, overrides=list(overrides),
                           return_hydra_config=return_hydra_config)
    finally:
        GlobalHydra.instance().clear()


def compose_job(config_name: str, *overrides: str):
    """``(job config, hydra node)`` of ``<app> OVERRIDES``: the config the task function gets
    (the composed one without its ``hydra`` node, removed as Hydra's own ``run_job`` does) and
    the node that names its run directory (``run.dir``, ``sweep.dir``/``sweep.subdir``)."""
    import copy

    from omegaconf import open_dict, read_write

    composed = compose_config(config_name, *overrides, return_hydra_config=True)
    job = copy.deepcopy(composed)
    with read_write(job), open_dict(job):
        del job["hydra"]
    return job, composed.hydra


def compose_train(*overrides: str):
    """The job config of ``plume-train OVERRIDES``."""
    return compose_config("train", *overrides)


@pytest.fixture
def compose_cfg():
    """compose_cfg(*overrides) -> the job config Hydra would build for plume-train."""
    def _compose(*overrides: str, hydra_cfg: bool = False):
        GlobalHydra.instance().clear()
        with plume_hydra():
            return compose("train", overrides=list(overrides), return_hydra_config=hydra_cfg)

    yield _compose
    GlobalHydra.instance().clear()


@pytest.fixture
def compose_cfg_analyze():
    """compose_cfg_analyze(*overrides) -> the config of plume-analyze."""
    def _compose(*overrides: str):
        GlobalHydra.instance().clear()
        with plume_hydra():
            return compose("analyze", overrides=list(overrides))

    yield _compose
    GlobalHydra.instance().clear()


def conf_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def plume_train_env() -> dict[str, str]:
    """Environment for plume-train subprocesses: one thread, no network for W&B."""
    return {**os.environ, **ONE_THREAD, "WANDB_SILENT": "true"}


def start_plume_train(overrides, root) -> subprocess.Popen:
    """``python -m plume.harness.apps.train OVERRIDES paths.root=ROOT`` as a subprocess of this
    checkout (stdout dropped, stderr kept for the failure message)."""
    return subprocess.Popen([sys.executable, "-m", "plume.harness.apps.train", *overrides,
                             f"paths.root={root}"], cwd=Path(__file__).resolve().parents[1],
                            env=plume_train_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
