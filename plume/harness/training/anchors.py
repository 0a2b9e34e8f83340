"""The normalisation written into every run directory (``score.json``), so a report can
normalise scores from files alone.

An environment's anchors are fixed score values or classic controllers (EnvSpec.anchors). A
controller anchor is evaluated by the same loop as a learned policy on each test set, once:
controllers are deterministic and test mode has no noise, so the per-trace scores are cached per
(trace set content, environment parameters, controller) next to the stage 1-2 cache.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from plume.envs.registry import EnvSpec
from plume.harness.training.evaluation import Evaluator
from plume.runs.record import SCORE_FILE  # noqa: F401  (harness modules import it here)
from plume.traces import TraceSet


def controller_trace_scores(spec: EnvSpec, params: Any, traces: TraceSet, controller: str,
                            cache_dir: Path) -> np.ndarray:
    """``controller``'s score on each trace of ``traces`` (test mode: one greedy episode per
    trace), from the cache when it is there. Anchors average it over a test set; curriculum
    samplers (Genet, CL2) take it per training trace."""
    key = hashlib.sha256(
        f"{spec.name}|{traces.content_hash}|{asdict(params)!r}|{controller}".encode()
    ).hexdigest()[:24]
    path = Path(cache_dir) / "anchors" / f"{key}.npy"
    if path.is_file():
        return np.load(path)
    if controller not in spec.controllers:
        raise ValueError(f"env {spec.name!r} has no controller {controller!r} "
                         f"({', '.join(spec.controllers)})")
    evaluator = Evaluator(spec, {traces.name: traces}, params)
    scores = evaluator.evaluate_set(traces.name, spec.controllers[controller](params))[
        "score"].to_numpy(np.float64)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npy")
    np.save(tmp, scores)
    os.replace(tmp, path)
    return scores


def controller_score(spec: EnvSpec, params: Any, evaluator: Evaluator, test_set: str,
                     controller: str, cache_dir: Path) -> float:
    """Mean score of ``controller`` on ``test_set`` (an anchor of the normalisation)."""
    return float(np.nanmean(controller_trace_scores(
        spec, params, evaluator.test_sets[test_set], controller, cache_dir)))


def score_description(spec: EnvSpec, params: Any, evaluator: Evaluator,
                      cache_dir: Path) -> dict[str, Any]:
    """What ``score.json`` holds: the score's name and unit, every episode field, and the
    floor and ceiling of the normalisation on each test set."""
    anchors = spec.anchors(params)

    def value(anchor: float | str, test_set: str) -> float:
        if isinstance(anchor, str):
            return controller_score(spec, params, evaluator, test_set, anchor, cache_dir)
        return float(anchor)

    per_set = {name: {"floor": value(anchors.floor, name), "ceiling": value(anchors.ceiling, name)}
               for name in evaluator.test_sets}
    return {
        "env": spec.name,
        "score": {"name": spec.score.name, "unit": spec.score.unit,
                  "description": spec.score.description,
                  "higher_is_better": spec.score.higher_is_better},
        "episode_fields": [asdict(m) for m in spec.episode_fields],
        "normalisation": {"floor": anchors.floor, "ceiling": anchors.ceiling,
                          "description": anchors.description, "test_sets": per_set},
    }
