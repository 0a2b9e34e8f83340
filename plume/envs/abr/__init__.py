"""ABR streaming on real or synthetic network traces, registered as ``env=abr``.

Two settings of one simulator (``sim.py``), chosen by ``env.variant``:

* ``gelato`` (default): the paper's main setting, Puffer / Gelato (paper §3.1): 10 encodings,
  2.002 s chunks, 15 s buffer, reward SSIM dB - 100 x stall - |delta SSIM dB|, the Gelato
  10 x 26 observation. Traces carry per-chunk sizes and SSIMs of every encoding (Puffer logs;
  the default dataset ``puffer_synthetic`` imitates them).
* ``pensieve``: the original Pensieve setting (6 bitrates, 48 x 4 s chunks, 60 s buffer, 80 ms
  RTT, linear QoE), on bandwidth-only traces: cooked and Mahimahi files, ``pensieve_synthetic``.

The reported score is the QoE per chunk after the start-up chunk (Pensieve's convention; for
Gelato the start-up chunk has neither stall nor change penalty, so excluding it only removes
the one chunk no controller can act on), normalised per test set between two classic
controllers: always-lowest (0) and RobustMPC (1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from plume.envs.registry import Anchors, Emulated, EnvSpec, Metric, Score, lazy
from plume.traces.abr import ABR_DATASETS, load_abr_dataset

VARIANTS = ("gelato", "pensieve")
_VARIANT_KEYS = {
    "gelato": ("quality_weight", "rebuf_weight", "change_weight", "max_steps"),
    "pensieve": ("rebuf_penalty", "smooth_penalty", "link_rtt_ms"),
}


@dataclass
class AbrParams:
    """``env.*`` keys of env=abr. Keys of the other variant are ignored (and must keep their
    defaults, so that a typo'd override is never silently dropped)."""

    variant: str = "gelato"
    # gelato: raw QoE = quality_weight x SSIM dB - rebuf_weight x stall - change_weight x |dSSIM|
    quality_weight: float = 1.0
    rebuf_weight: float = 100.0
    change_weight: float = 1.0
    # gelato: training episodes are truncated after this many chunks (the reference's 500).
    max_steps: Optional[int] = 500
    # pensieve: QoE = bitrate Mbit/s - rebuf_penalty x rebuffer s - smooth_penalty x |dbitrate|
    rebuf_penalty: float = 4.3
    smooth_penalty: float = 1.0
    link_rtt_ms: float = 80.0

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"env.variant={self.variant!r} is not known; valid choices: "
                             f"{', '.join(VARIANTS)}")
        other = next(v for v in VARIANTS if v != self.variant)
        defaults = AbrParams.__dataclass_fields__
        changed = [k for k in _VARIANT_KEYS[other] if getattr(self, k) != defaults[k].default]
        if changed:
            raise ValueError(f"env.{changed[0]} belongs to env.variant={other}, not "
                             f"{self.variant}")

    def sim_kwargs(self, mode: str) -> dict[str, Any]:
        """The simulator keyword arguments of this variant (test episodes are never cut)."""
        kwargs = {k: getattr(self, k) for k in _VARIANT_KEYS[self.variant]}
        if self.variant == "gelato" and mode == "test":
            kwargs["max_steps"] = None
        return kwargs


def _make(traces, n_envs, sampler, *, mode, seed, params: AbrParams):
    from plume.envs.abr.sim import AbrVecEnv

    return AbrVecEnv(traces, n_envs, sampler, mode=mode, seed=seed, variant=params.variant,
                     **params.sim_kwargs(mode))


def _single(traces, sampler=None, *, mode="train", seed=None, params=None):
    from plume.envs.abr.sim import AbrEnv

    params = params or AbrParams()
    return AbrEnv(traces, sampler, mode=mode, seed=seed, variant=params.variant,
                  **params.sim_kwargs(mode))


def _controller(name: str):
    def build(params: AbrParams):
        from plume.envs.abr.controllers import make_controller

        return make_controller(name, params.variant, **params.sim_kwargs("test"))

    return build


def _score(episodes) -> np.ndarray:
    length = np.asarray(episodes["length"], float)
    after_start = np.asarray(episodes["return"], float) - np.asarray(episodes["first_return"])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(length > 1, after_start / (length - 1), np.nan)


def _deployment(params: AbrParams) -> dict[str, Any]:
    """What a deployed ABR controller needs (``contract.json``): the observation, the action
    in the player's terms and the constants the runtime's session uses."""
    from plume.envs.abr import observation
    from plume.envs.abr.sim import GELATO_DEFAULTS, PENSIEVE_DEFAULTS
    from plume.envs.abr.video import BITRATES_KBPS, VIDEO_SIZES

    if params.variant == "gelato":
        p = {**GELATO_DEFAULTS, **params.sim_kwargs("test")}
        return {"observation": observation.describe_gelato(p), "action": {
            "kind": "discrete", "n": observation.GELATO_LEVELS,
            "meaning": "format of the next chunk, in increasing quality order (Puffer's format "
                       "order, sorted by width, height and -crf)",
            "chunk_seconds": p["chunk_seconds"]},
            "constants": {k: p[k] for k in ("history_len", "max_buffer", "chunk_seconds",
                                            "quality_weight", "rebuf_weight", "change_weight")}}
    p = {**PENSIEVE_DEFAULTS, **params.sim_kwargs("test")}
    return {"observation": observation.describe_pensieve(p), "action": {
        "kind": "discrete", "n": len(BITRATES_KBPS), "meaning": "bitrate level of the next chunk",
        "levels_kbps": list(BITRATES_KBPS), "chunk_seconds": p["chunk_seconds"]},
        "constants": {"n_chunks": p["n_chunks"], "default_level": 1,
                      "link_rtt_ms": p["link_rtt_ms"], "chunk_seconds": p["chunk_seconds"],
                      "video": "EnvivioDash3 (Pensieve's test video)",
                      "video_sizes_bytes": VIDEO_SIZES.tolist()}}


CONTROLLER_NAMES = ("always_lowest", "always_highest", "bba", "rate_based", "robust_mpc",
                    "bola_v1", "bola_v2")

SPEC = EnvSpec(
    name="abr",
    description="adaptive bitrate streaming: Puffer/Gelato (default) or Pensieve setting",
    datasets={name: dataset.description for name, dataset in ABR_DATASETS.items()},
    load_builtin=load_abr_dataset,
    builtin_test_sets=lambda dataset: [dataset],
    trace_formats=("cooked", "mahimahi", "puffer", "npz"),
    params=AbrParams,
    required_channels=lambda params: (("time", "bandwidth", "chunk_sizes", "ssim_db")
                                      if params.variant == "gelato" else ("time", "bandwidth")),
    make=_make,
    single=_single,
    episode_fields=(
        Metric("return", "QoE", True, "sum of raw QoE over the episode"),
        Metric("return_transformed", "reward", True, "sum of the agent's rewards"),
        Metric("first_return", "QoE", True, "raw QoE of the start-up chunk"),
        Metric("quality", "SSIM dB or Mbit/s", True,
               "sum of per-chunk quality (gelato: SSIM dB; pensieve: bitrate Mbit/s)"),
        Metric("stall", "s", False, "stall (rebuffer) seconds"),
        Metric("change", "SSIM dB or Mbit/s", False, "sum of |quality change| between chunks"),
        Metric("video_seconds", "s", True, "seconds of video played"),
        Metric("length", "chunks", True, "chunks played"),
    ),
    score=Score("qoe_per_chunk", "QoE per chunk",
                "raw QoE per chunk after the start-up chunk (the env's reward before the "
                "agent's normalisation)", _score),
    anchors=lambda params: Anchors(
        floor="always_lowest", ceiling="robust_mpc",
        description=("Floor = the always-lowest-quality controller, ceiling = RobustMPC, each "
                     "evaluated on the same test set with the same env parameters; 1 means "
                     "as good as RobustMPC, above 1 better.")),
    controllers={name: _controller(name) for name in CONTROLLER_NAMES},
    baseline_controller="robust_mpc",  # Genet's ABR baseline
    analysis={"channel": "bandwidth", "resample_s": 0.5, "feature_set": "puffer",
              "k_range": (6, 15),
              "selection": {"fraction": 0.4, "steps": 5, "central_rounding": "ceil"}},
    # Each setting's learner (paper §4): Gelato's A2C, or Pensieve's A2C on its own network.
    algo_preset=lambda params: "a2c_gelato" if params.variant == "gelato" else "a2c_pensieve",
    default_dataset=lambda params: ("puffer_synthetic" if params.variant == "gelato"
                                    else "pensieve_synthetic"),
    deployment=_deployment,
    # The slices on upper layers, in their own files, loaded only by the layer that uses them:
    # deploy.py builds on plume.deploy, emulate.py on plume.emulation, networks.py on torch.
    deploy=lazy("plume.envs.abr.deploy", "DEPLOYMENTS"),
    emulation=Emulated(scenario=lazy("plume.envs.abr.emulate", "AbrEmulation"),
                       metrics=("score", "mean_level", "stall", "throughput_mbps")),
    networks={"gelato": lazy("plume.envs.abr.networks", "GelatoExtractor"),
              "pensieve": lazy("plume.envs.abr.networks", "PensieveExtractor")},
    channel_help=("the gelato setting replays Puffer traces (per-chunk sizes and SSIMs of every "
                  "encoding); bandwidth-only traces (cooked, mahimahi) play with "
                  "env.variant=pensieve"),
    common_random_numbers=True,  # every draw goes through TraceVecEnv._draws
)

__all__ = ["SPEC", "AbrParams", "VARIANTS"]
