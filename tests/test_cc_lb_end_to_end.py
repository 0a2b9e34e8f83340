"""env=cc and env=lb through the whole harness: Plume's samplers train end to end,
plume-analyze clusters their traces (against the generators' ground truth where there is one),
and plume-report scores learned runs beside the classic controllers, normalised by them."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hydra import compose
from hydra.core.global_hydra import GlobalHydra

from plume.envs.registry import get_env
from plume.harness.apps.train import run_job
from plume.harness.config.configdir import plume_hydra
from tests.conftest import TINY

TINY_ENV = [o for o in TINY if not o.startswith(("env.test_sets", "algo."))] + [
    "logger=none", "algo.hidden_sizes=[16,16]"]
SHRINK = {"cc": ["env=cc", "algo.n_steps=8"],
          "lb": ["env=lb", "algo.n_steps=32", "algo.n_minibatches=4", "algo.n_epochs=2"]}


@pytest.mark.parametrize("env", ["cc", "lb"])
@pytest.mark.parametrize("sampler", ["uniform", "plume_static", "plume_dynamic"])
def test_each_plume_sampler_trains_end_to_end(env, sampler, compose_cfg, tmp_path):
    run_job(compose_cfg(*TINY_ENV, *SHRINK[env], f"sampler={sampler}"), tmp_path)
    spec = get_env(env)
    frame = pd.read_parquet(tmp_path / "eval.parquet")
    dataset = spec.default_dataset(spec.params())
    assert set(frame["test_set"]) == set(spec.builtin_test_sets(dataset))
    assert frame["score"].notna().all() and frame["cluster"].notna().all()
    assert set(frame["progress"]) == {0.0, 0.5, 1.0}
    assert json.loads((tmp_path / "status.json").read_text())["state"] == "completed"
    if sampler != "uniform":
        weights = pd.read_parquet(tmp_path / "sampler.parquet")
        assert (weights["grouping"] == "cluster").any()


@pytest.mark.parametrize("env,dataset,expect", [
    ("cc", "aurora", "k="),  # link tuples: no ground truth, clusters of the raw tuple
    ("cc", "cc_series", "adjusted Rand index vs ground truth"),
    ("lb", "lb_mixed", "adjusted Rand index vs ground truth"),
])
def test_plume_analyze_prints_the_clusters(env, dataset, expect, compose_cfg_analyze, tmp_path):
    from plume.harness.apps.analyze import report

    text = report(compose_cfg_analyze(f"env={env}", f"env.dataset={dataset}",
                                      f"paths.root={tmp_path}",
                                      f"paths.cache={tmp_path / 'cache'}"), tmp_path / "out")
    assert expect in text and (tmp_path / "out" / "clusters.png").is_file()
    if dataset == "aurora":
        assert "candidate features: 4" in text  # bandwidth, latency, queue, loss


def _controller_run(env: str, controller: str, run_dir, cache) -> None:
    from plume.harness.apps.evaluate import run_controller

    GlobalHydra.instance().clear()
    with plume_hydra():
        cfg = compose("eval", overrides=[f"env={env}", f"controller={controller}",
                                         f"paths.cache={cache}"])
    GlobalHydra.instance().clear()
    run_controller(cfg, run_dir)


@pytest.mark.parametrize("env,controllers", [
    ("cc", ["constant_rate", "oracle", "aimd", "cubic"]),
    ("lb", ["random", "least_work_left", "join_shortest_queue", "power_of_two", "round_robin"]),
])
def test_plume_report_puts_learned_runs_beside_the_classic_controllers(
        env, controllers, compose_cfg, tmp_path):
    from plume.report import build_report

    for seed in range(2):
        run_job(compose_cfg(*TINY_ENV, *SHRINK[env], f"seed={seed}"),
                tmp_path / "runs" / "learned" / f"seed={seed}")
    for name in controllers:
        _controller_run(env, name, tmp_path / "runs" / "controllers" / name / "seed=0",
                        tmp_path / "cache")
    result = build_report(tmp_path / "runs", tmp_path / "report", figures=False, reps=200,
                          baseline=None)
    text = result.report.read_text()
    spec = get_env(env)
    assert spec.score.unit in text
    table = result.tables["controllers"]
    assert set(table["controller"]) == set(controllers)
    anchors = spec.anchors(spec.params())
    by_name = table.groupby("controller")["normalised"]
    # one row per (controller, test set); the anchors sit at 0 and 1 on every test set
    assert by_name.size().eq(len(spec.builtin_test_sets(spec.default_dataset(None)))).all()
    assert by_name.get_group(anchors.floor).abs().max() < 1e-9
    assert (by_name.get_group(anchors.ceiling) - 1.0).abs().max() < 1e-9
