"""How eval.parquet and sampler.parquet here were recorded (before the environment contract):

    PYTHONPATH=. python tests/data/tracebench_reference/record.py <run dir>
"""
import sys
from pathlib import Path

from hydra import compose

import plume.harness.apps.train as T
from plume.harness.config.configdir import plume_hydra
from tests.conftest import TINY  # first: it pins the floating-point path

out = Path(sys.argv[1])
with plume_hydra():
    cfg = compose("train", overrides=TINY + [
        "sampler=plume_dynamic", "sampler.recompute_every=8", "train.total_steps=3072", "seed=3",
        "logger=none"])
T.run_job(cfg, out)
