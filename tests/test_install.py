"""``pip install .`` (a wheel, not an editable install) runs the command-line apps from any
directory: the configs travel inside the package (plume/conf links to conf/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_wheel_installed_elsewhere_trains_a_tiny_job_and_lists_its_config_groups(tmp_path):
    wheel_dir, site = tmp_path / "wheel", tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", str(ROOT), "-w", str(wheel_dir)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = wheel_dir.glob("*.whl")
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                              "--target", str(site), str(wheel)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-2000:]
    # dependencies from this environment, plume and experiments only from the wheel
    env = {**os.environ, "PYTHONPATH": str(site)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=elsewhere, env=env,
                              capture_output=True, text=True, timeout=600)

    where = run("-c", "import plume, experiments; print(plume.__file__, experiments.__file__)")
    assert where.stdout.count(str(site)) == 2, where.stdout + where.stderr
    helped = run("-m", "plume.harness.apps.train", "--help")
    assert helped.returncode == 0
    assert "sampler: " in helped.stdout and "plume_dynamic" in helped.stdout
    job = run("-m", "plume.harness.apps.train", "train.total_steps=1024", "train.eval_points=1",
              "env.n_envs=8", "env.test_sets=[majority_slow]", "algo.n_steps=64",
              "algo.hidden_sizes=[16]", "logger=none", "sampler=plume_static",
              f"paths.root={elsewhere / 'runs'}")
    assert job.returncode == 0, job.stderr[-3000:]
    (status,) = elsewhere.glob("runs/default/*/seed=0/status.json")
    assert json.loads(status.read_text())["state"] == "completed"
