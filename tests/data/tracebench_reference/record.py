"""How eval.parquet and sampler.parquet here were recorded (before the environment contract):

    PYTHONPATH=. python tests/data/tracebench_reference/record.py <run dir>
"""
import sys
from pathlib import Path
from tests.conftest import TINY, CONF_DIR  # first: it pins the floating-point path
from hydra import compose, initialize_config_dir
import plume.harness.train as T
out = Path(sys.argv[1])
with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
    cfg = compose("train", overrides=TINY + [
        "sampler=plume_dynamic", "sampler.recompute_every=8", "train.total_steps=3072", "seed=3",
        "logger=none"])
T.run_job(cfg, out)
