"""How the eval.parquet files here were recorded (PPO before the algorithm contract):

    PYTHONPATH=. python tests/data/ppo_reference/record.py

under the floating-point path tests/conftest.py pins (PLUME_TEST_FP=avx2).

plr/: PPO + PLR (value_l1 scores from the advantages) on TraceBench majority_fast, seed 5.
abr/: PPO (ppo_abr preset) + uniform on a 12-trace slice of puffer_synthetic, seed 2.
"""
import tempfile
from pathlib import Path

from hydra import compose  # noqa: E402

import plume.harness.apps.train as T  # noqa: E402
from plume.harness.config.configdir import plume_hydra
from tests.conftest import TINY  # first: it pins the floating-point path

HERE = Path(__file__).parent
JOBS = {
    "plr": TINY + ["sampler=plr", "train.total_steps=3072", "seed=5", "logger=none"],
    "abr": ["env=abr", "algo=ppo_abr", "train.total_steps=1536", "train.eval_points=2", "env.n_envs=8",
            "algo.n_steps=64", "algo.hidden_sizes=[32,32]", "train.progress_every_s=0",
            "sampler=uniform", "seed=2", "logger=none", "analysis.k_range=[2,3]",
            "analysis.selection.k_end=3", "env.test_sets=[puffer_synthetic]"],
}

if __name__ == "__main__":
    for name, overrides in JOBS.items():
        with tempfile.TemporaryDirectory() as tmp, plume_hydra():
            cfg = compose("train", overrides=overrides + [f"paths.cache={tmp}/cache"])
            T.run_job(cfg, Path(tmp) / "run")
            (HERE / name).mkdir(exist_ok=True)
            for table in ("eval.parquet", "sampler.parquet"):
                (HERE / name / table).write_bytes((Path(tmp) / "run" / table).read_bytes())
