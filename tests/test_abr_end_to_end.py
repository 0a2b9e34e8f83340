"""env=abr end to end: a directory of cooked files and one of Mahimahi files train and report
from the command line with no user code; Gelato with Plume's samplers; malformed files fail
before any work in one line; plume-analyze on the synthetic Puffer-like dataset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from plume.harness.apps.train import run_job
from plume.traces.abr import generate_pensieve_like
from plume.traces.loaders import in_test_split, write_cooked, write_mahimahi
from tests.conftest import TINY, plume_train_env

# Tiny budgets for env=abr (TINY without its TraceBench test set) and a cluster range that a
# 40-trace user dataset can fill.
ABR_TINY = [o for o in TINY if not o.startswith("env.test_sets")] + [
    "logger=none", "analysis.k_range=[2,4]", "analysis.selection.k_end=4",
]


def _trace_dir(root: Path, fmt: str, n: int = 40) -> Path:
    """``n`` Pensieve-like traces written as cooked or Mahimahi files (about 20 % land in the
    test split by the hash rule)."""
    traces = generate_pensieve_like(n, seed=5)
    folder = root / f"{fmt}_traces"
    for i in range(n):
        length = traces.lengths[i]
        time, bw = traces.time[i, :length], traces.bandwidth[i, :length]
        period = float(traces.constants["period"][i])
        if fmt == "cooked":
            write_cooked(folder / f"trace_{i:02d}.txt", time, bw, period=period)
        else:
            write_mahimahi(folder / f"trace_{i:02d}.log", time, bw, period)
    return folder


@pytest.mark.parametrize("fmt", ["cooked", "mahimahi"])
def test_a_directory_of_trace_files_trains_and_reports_with_no_user_code(
        compose_cfg, tmp_path, fmt):
    from plume.report import build_report

    folder = _trace_dir(tmp_path, fmt)
    overrides = ["algo=a2c_pensieve", *ABR_TINY, "env=abr", "env.variant=pensieve",
                 f"env.dataset={folder}", f"env.trace_format={fmt}"]
    for seed in range(2):
        run_job(compose_cfg(*overrides, f"seed={seed}"), tmp_path / "runs" / f"seed={seed}")
    run = tmp_path / "runs" / "seed=0"
    frame = pd.read_parquet(run / "eval.parquet")
    expected = sorted(f"trace_{i:02d}" for i in range(40) if in_test_split(f"trace_{i:02d}"))
    final = frame[frame["progress"] == 1.0]
    assert sorted(final["trace_id"]) == expected  # its own hash-rule test split, nothing else
    assert set(final["test_set"]) == {folder.name}
    assert np.all(final["length"] == 48) and np.isfinite(final["score"]).all()
    score = json.loads((run / "score.json").read_text())
    anchors = score["normalisation"]["test_sets"][folder.name]
    assert anchors["floor"] < anchors["ceiling"]  # always-lowest below RobustMPC
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    from plume.harness.apps.evaluate import run_controller
    from plume.harness.config.configdir import plume_hydra

    GlobalHydra.instance().clear()
    with plume_hydra():
        cfg = compose("eval", overrides=[*overrides[-4:], "controller=bba",
                                         f"paths.cache={tmp_path / 'cache'}"])
    GlobalHydra.instance().clear()
    run_controller(cfg, tmp_path / "runs" / "controllers" / "seed=0")
    result = build_report(tmp_path / "runs", tmp_path / "report", figures=False, reps=200,
                          baseline=None)
    text = result.report.read_text()
    assert "QoE per chunk" in text and "RobustMPC" in text
    bba = result.tables["controllers"]
    assert list(bba["controller"]) == ["bba"] and bba["dataset"].iloc[0] == str(folder)
    assert 0.0 < bba["normalised"].iloc[0] < 1.5


def test_gelato_trains_with_each_plume_sampler(compose_cfg, tmp_path):
    for sampler in ("plume_static", "plume_dynamic"):  # uniform: tests/test_deploy.py trains it
        out = tmp_path / sampler
        run_job(compose_cfg(*ABR_TINY, "env=abr", f"sampler={sampler}"), out)
        frame = pd.read_parquet(out / "eval.parquet")
        assert set(frame["test_set"]) == {"puffer_synthetic"} and len(frame) == 2 * 300 + 300
        assert frame["cluster"].notna().all()  # every test trace labelled with a cluster
        status = json.loads((out / "status.json").read_text())
        assert status["state"] == "completed"
        config = yaml.safe_load((out / "config.yaml").read_text())
        assert config["env"]["dataset"] == "puffer_synthetic"  # the null default, resolved
        assert config["env"]["test_sets"] == ["puffer_synthetic"]


def test_a_malformed_trace_file_fails_before_work_in_one_line(tmp_path):
    folder = _trace_dir(tmp_path, "cooked", n=10)
    bad = folder / "trace_03.txt"
    lines = bad.read_text().splitlines()
    lines[4] = "12.0 abc"
    bad.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "plume.harness.apps.train", "env=abr", "env.variant=pensieve",
         "algo=a2c_pensieve", f"env.dataset={folder}", "env.trace_format=cooked", f"paths.root={tmp_path / 'runs'}",
         "logger=none"],
        capture_output=True, text=True, env=plume_train_env(), timeout=300)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "Traceback" not in done.stderr
    assert "trace_03.txt:5" in errors[0] and "trace 'trace_03'" in errors[0]


def test_plume_analyze_prints_clusters_of_the_synthetic_puffer_dataset(compose_cfg_analyze,
                                                                       tmp_path):
    from plume.harness.apps.analyze import report

    text = report(compose_cfg_analyze("env=abr", f"paths.root={tmp_path}",
                                      f"paths.cache={tmp_path / 'cache'}"), tmp_path / "out")
    assert "dataset puffer_synthetic/train: 1000 traces" in text
    assert "candidate features: 16" in text and "ground-truth kinds x clusters" in text
    assert (tmp_path / "out" / "clusters.png").is_file()


def test_traces_too_short_for_an_episode_are_refused_before_work_naming_the_trace(
        compose_cfg, tmp_path):
    from plume.harness.config.schema import ConfigError
    from plume.traces.abr import generate_puffer_like

    sessions = generate_puffer_like(12, seed=1)
    short = sessions.subset(range(12), name="short")
    lengths = short.lengths.copy()
    lengths[7] = 60  # below the Gelato minimum of 86 chunks
    clipped = type(short)(name="short", series=dict(short.series), lengths=lengths,
                          chunks=dict(short.chunks), trace_ids=short.trace_ids)
    path = clipped.save(tmp_path / "short.npz")
    with pytest.raises(ConfigError, match=rf"trace .{short.trace_ids[7]}. has 60 chunks"):
        run_job(compose_cfg(*ABR_TINY, "env=abr", f"env.dataset={path}",
                            "env.trace_format=npz", "analysis.k_range=[2,3]"),
                tmp_path / "run")


def test_bandwidth_only_traces_in_the_gelato_setting_say_which_variant_plays_them(
        compose_cfg, tmp_path):
    from plume.harness.config.schema import ConfigError

    folder = _trace_dir(tmp_path, "cooked", n=10)
    with pytest.raises(ConfigError, match="needs channel.s. chunk_sizes, ssim_db.*"
                                          "env.variant=pensieve"):
        run_job(compose_cfg(*ABR_TINY, "env=abr", f"env.dataset={folder}",
                            "env.trace_format=cooked"), tmp_path / "run")
