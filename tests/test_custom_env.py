"""An environment of a user's own, outside plume (examples/custom_env), trained from the
command line with a Plume sampler: the environment contract is open to users."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_env"


def test_the_example_fits_in_under_60_lines():
    assert len((EXAMPLE / "link_share.py").read_text().splitlines()) < 60


def test_plume_train_trains_a_user_environment_with_plume_dynamic(tmp_path):
    command = [sys.executable, "-m", "plume.harness.apps.train",
               f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", "env=link_share",
               "sampler=plume_dynamic", "train.total_steps=8192", "train.eval_points=2",
               "logger=none", f"paths.root={tmp_path}", f"paths.cache={tmp_path / 'cache'}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = tmp_path.glob("default/*/seed=0")
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    evals = pd.read_parquet(run / "eval.parquet")
    assert set(evals["test_set"]) == {"links"} and len(evals) == 3 * 300
    score = evals.groupby("progress")["score"].mean()
    # the untrained policy sits near the 1 Mbit/s floor; a uniformly random sender earns about
    # 1.8; the best fixed-rate rule per link about 3.3
    assert score.loc[0.0] < 1.5 and score.loc[1.0] > 2.5, score
    weights = pd.read_parquet(run / "sampler.parquet")
    assert (weights["grouping"] == "cluster").any()  # stages 1-2 ran on the user's traces
