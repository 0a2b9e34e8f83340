"""One ``seed`` per job, split into independent streams (docs/ARCHITECTURE.md "Seeds").

Streams are spawned in a fixed order, so adding a stream at the end never changes the others.

``JobIsolation`` (a Hydra callback, listed in ``conf/hydra/default.yaml``) puts the process into
the same state at the start of every job: launchers that reuse worker processes (joblib's loky,
Ray) run many jobs in one process one after another, and each must see what a fresh process
would give it.
"""

from __future__ import annotations

import logging
import random
import sys
from typing import Any

import numpy as np
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

STREAMS = ("torch", "env", "sampler", "eval", "global")
log = logging.getLogger("plume")


def spawn_streams(seed: int) -> dict[str, np.random.SeedSequence]:
    """Independent SeedSequences for each consumer of randomness in a job."""
    children = np.random.SeedSequence(seed).spawn(len(STREAMS))
    return dict(zip(STREAMS, children))


def torch_seed(stream: np.random.SeedSequence) -> int:
    """A 63-bit integer seed for torch from a SeedSequence."""
    return int(stream.generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


def seed_global_rngs(seed: int) -> None:
    """Seed Python's, NumPy's legacy and torch's global RNGs from the job's ``global`` stream.

    Plume's own code never draws from them, but user or third-party code may (a custom
    environment, a library's default initialiser). Unseeded, they would carry on from the
    previous job in a reused worker and start from OS entropy in a fresh process; seeded here,
    both give the same draws for the same job seed."""
    import torch

    stream = spawn_streams(seed)["global"]
    random.seed(int(stream.generate_state(1)[0]))
    np.random.seed(stream.generate_state(4))
    torch.manual_seed(torch_seed(stream))


def finish_open_wandb_run() -> bool:
    """Finish a W&B run a job left open (the tracker finishes its own; this catches any
    other), so that it neither absorbs the next job's logging nor stays open in the worker.
    W&B is not imported when the job never imported it. Returns whether one was open."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is None:
        return False
    log.warning("a W&B run (%s) was still open at the end of the job: finishing it", run.id)
    run.finish(exit_code=1)
    return True


class JobIsolation(Callback):
    """Every job starts with global RNGs seeded from its ``seed`` and torch using
    ``train.torch_threads`` threads, and ends with no W&B run open: the same in a fresh process
    as in a worker that ran other jobs before (docs/ARCHITECTURE.md "Sweeps")."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        import torch

        seed_global_rngs(int(OmegaConf.select(config, "seed", default=0)))
        threads = OmegaConf.select(config, "train.torch_threads", default=None)
        if threads:
            torch.set_num_threads(int(threads))

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        finish_open_wandb_run()
