"""TraceBench: Plume's controlled ABR environment (simulator in ``env.py``, traces in
``plume.traces.tracebench``), registered as ``env=tracebench``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plume.envs.registry import Anchors, EnvSpec, Metric, Score
from plume.envs.tracebench.env import (
    BITRATES,
    DELAY_NORM,
    SIZE_NORM,
    TraceBenchEnv,
    TraceBenchVecEnv,
    transform_reward,
)
from plume.traces.tracebench import DATASETS, load_tracebench

__all__ = ["SPEC", "TraceBenchEnv", "TraceBenchParams", "TraceBenchVecEnv", "transform_reward"]


@dataclass
class TraceBenchParams:
    """``env.*`` keys of TraceBench: raw QoE = quality_weight x bitrate - rebuf_weight x stall."""

    quality_weight: float = 1.0
    rebuf_weight: float = 6.0


def _make(traces, n_envs, sampler, *, mode, seed, params: TraceBenchParams):
    return TraceBenchVecEnv(traces, n_envs, sampler, mode=mode, seed=seed,
                            quality_weight=params.quality_weight,
                            rebuf_weight=params.rebuf_weight)


def _single(traces, sampler=None, *, mode="train", seed=None, params=TraceBenchParams()):
    return TraceBenchEnv(traces, sampler, mode=mode, seed=seed,
                         quality_weight=params.quality_weight, rebuf_weight=params.rebuf_weight)


def _anchors(params: TraceBenchParams) -> Anchors:
    low, high = (params.quality_weight * float(b) for b in (BITRATES[0], BITRATES[-1]))
    return Anchors(
        floor=low,
        ceiling=high,
        description=(
            f"Floor {low:g} = a controller that always picks the lowest bitrate and never stalls "
            f"(QoE {low:g} per chunk); ceiling {high:g} = the highest bitrate on every chunk with "
            "no stall (the most any controller can get). So 0 = always-lowest-bitrate, "
            "1 = perfect; a score below 0 means the controller did worse than never leaving the "
            f"lowest bitrate (each stall second costs {params.rebuf_weight:g})."
        ),
    )


class _Constant:
    """A classic reference controller that always plays one bitrate index."""

    def __init__(self, action: int) -> None:
        self.action = action

    def act(self, obs: np.ndarray) -> np.ndarray:
        return np.full(len(obs), self.action, dtype=np.int64)

    __call__ = act


class RateBased:
    """The classic rate-based ABR rule on TraceBench's observation: the highest bitrate not
    above the harmonic mean of the last ``window`` chunks' throughput (size / download delay,
    both read back from the normalised history rows), the lowest before any chunk."""

    def __init__(self, window: int = 5, history_len: int = 10) -> None:
        self.window, self.history_len = window, history_len

    def act(self, obs: np.ndarray) -> np.ndarray:
        rows = np.asarray(obs, dtype=np.float64)[:, : 5 * self.history_len].reshape(
            len(obs), self.history_len, 5)[:, -self.window:]
        size, delay = rows[..., 1] * SIZE_NORM, rows[..., 2] * DELAY_NORM
        seen = delay > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            inverse = np.where(seen, delay / np.where(seen, size, 1.0), 0.0).sum(axis=1)
            estimate = np.where(seen.any(axis=1), seen.sum(axis=1) / inverse, 0.0)
        fits = np.asarray(BITRATES, dtype=np.float64)[None, :] <= estimate[:, None]
        return np.maximum(fits.sum(axis=1) - 1, 0).astype(np.int64)

    __call__ = act


SPEC = EnvSpec(
    name="tracebench",
    description="Plume's controlled ABR benchmark: 3 bitrates, two-state Markov traces",
    datasets={name: f"TraceBench {name.replace('_', ' ')} (1000 train / 1000 test traces)"
              for name in DATASETS},
    load_builtin=load_tracebench,
    builtin_test_sets=lambda dataset: list(DATASETS),
    trace_formats=("npz",),
    params=TraceBenchParams,
    required_channels=lambda params: ("time", "bandwidth", "video_sizes"),
    make=_make,
    single=_single,
    episode_fields=(
        Metric("return", "QoE", True, "sum of raw QoE over the episode"),
        Metric("return_transformed", "reward", True, "sum of the agent's transformed rewards"),
        Metric("quality", "bitrate", True, "sum of chosen bitrates"),
        Metric("stall", "s", False, "stall seconds"),
        Metric("length", "chunks", True, "chunks played"),
    ),
    score=Score("qoe_per_chunk", "QoE per chunk",
                "raw QoE (quality_weight x bitrate - rebuf_weight x stall) per chunk",
                lambda ep: np.asarray(ep["return"], float) / np.asarray(ep["length"], float)),
    anchors=_anchors,
    controllers={"always_lowest": lambda params: _Constant(0),
                 "always_highest": lambda params: _Constant(len(BITRATES) - 1),
                 "rate_based": lambda params: RateBased()},
    baseline_controller="always_highest",  # the strongest of its classic controllers
    analysis={"channel": "bandwidth", "resample_s": 0.0, "feature_set": "tracebench",
              "k_range": (3, 8),
              "selection": {"fraction": 0.5, "steps": 7, "central_rounding": "floor"}},
    algo_preset="ppo",
    default_dataset=lambda params: "majority_fast",
    common_random_numbers=True,  # every draw goes through TraceVecEnv._draws
)
