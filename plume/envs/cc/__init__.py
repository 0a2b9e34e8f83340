"""Congestion control in Plume's Aurora setting (paper §3.4), registered as ``env=cc``.

A trace is a link: Aurora's 4-tuple of constants (``aurora``: bandwidth, one-way latency,
queue, random loss) or a Genet-style bandwidth series with constant latency, queue and loss
(``cc_series``); see ``plume.traces.cc``. The simulator (``sim.py``) is a batched fluid model
of PCC-RL's single-link gym with Aurora's action, observation and reward, checked against a
packet-level reference (``packet.py``). The score is the mean Aurora reward per monitor
interval, normalised between a fixed-rate sender (0) and the bandwidth oracle (1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from plume.envs.registry import Anchors, Emulated, EnvSpec, Metric, Score, lazy
from plume.traces.cc import CC_DATASETS, load_cc_dataset

__all__ = ["SPEC", "CcParams"]


@dataclass
class CcParams:
    """``env.*`` keys of env=cc (the simulator's arguments, see ``sim.CcVecEnv``)."""

    # Monitor intervals in the observation (Aurora 10; Plume's frame stacking 25).
    history: int = 10
    # Monitor intervals per episode (Aurora's 400).
    episode_mis: int = 400
    # Fluid sub-steps per monitor interval (even).
    substeps: int = 8
    # Sending-rate clip, packets/s (Aurora's [40, 1000]).
    min_rate: float = 40.0
    max_rate: float = 1000.0
    # Action scale: rate x (1 + delta a) or / (1 - delta a) (Aurora's 0.025).
    delta_scale: float = 0.025
    # Initial rate / bandwidth range: training draws U(low, high); test mode a fixed point
    # per trace (from a hash of its id).
    init_rate_low: float = 0.3
    init_rate_high: float = 1.5
    # step() returns the Aurora reward times this (the episode's return_transformed).
    reward_scale: float = 1.0
    # The constant_rate controller's rate, packets/s (the normalisation floor).
    constant_rate: float = 300.0

    def __post_init__(self) -> None:
        for name, low in [("history", 1), ("episode_mis", 1), ("substeps", 2)]:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"env.{name} must be an int >= {low}, got {value!r}")
        if self.substeps % 2:
            raise ValueError(f"env.substeps must be even, got {self.substeps}")
        for name in ("min_rate", "max_rate", "delta_scale", "init_rate_low", "init_rate_high",
                     "constant_rate"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"env.{name} must be a positive number, got {value}")
        for low, high in [("min_rate", "max_rate"), ("init_rate_low", "init_rate_high")]:
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"env.{low} ({getattr(self, low)}) must not exceed "
                                 f"env.{high} ({getattr(self, high)})")
        if not np.isfinite(self.reward_scale):
            raise ValueError(f"env.reward_scale must be finite, got {self.reward_scale}")

    def sim_kwargs(self) -> dict:
        """The simulator's keyword arguments (every key but the controller's)."""
        kwargs = asdict(self)
        del kwargs["constant_rate"]
        return kwargs


def _make(traces, n_envs, sampler, *, mode, seed, params: CcParams):
    from plume.envs.cc.sim import CcVecEnv

    return CcVecEnv(traces, n_envs, sampler, mode=mode, seed=seed, **params.sim_kwargs())


def _single(traces, sampler=None, *, mode="train", seed=None, params=None):
    from plume.envs.cc.sim import CcEnv

    params = params or CcParams()
    return CcEnv(traces, sampler, mode=mode, seed=seed, **params.sim_kwargs())


def _controller(name: str):
    def build(params: CcParams):
        from plume.envs.cc.controllers import CONTROLLERS

        if name == "constant_rate":
            return CONTROLLERS[name](params.constant_rate)
        return CONTROLLERS[name]()

    return build


PACKET_BYTES = 1500
"""Bytes per packet of the simulator's packet units (Aurora's and the CC traces')."""


def _deployment(params: CcParams) -> dict:
    """What a deployed rate controller needs (``contract.json``). The simulator works in
    packets/s; a real sender in bit/s = packets/s x 1500 x 8."""
    from plume.envs.cc.observation import describe_aurora

    to_bps = PACKET_BYTES * 8.0
    return {"observation": describe_aurora(params.history), "action": {
        "kind": "rate_change", "shape": [1], "delta_scale": params.delta_scale,
        "rule": "a' = delta_scale x a; rate x (1 + a') if a' >= 0, else rate / (1 - a'); "
                "then clipped",
        "clip_packets_per_s": [params.min_rate, params.max_rate],
        "clip_bps": [params.min_rate * to_bps, params.max_rate * to_bps],
        "packet_bytes": PACKET_BYTES,
        "pcc_rl_deployment": {"clip_bps": [0.5e6, 300e6], "initial_bps": 6e6,
                              "note": "PCC-RL's deployed clip and start; the runtime uses "
                                      "the training clip unless told otherwise"}},
        "constants": {"history": params.history, "delta_scale": params.delta_scale,
                      "min_rate": params.min_rate, "max_rate": params.max_rate,
                      "packet_bytes": PACKET_BYTES}}


def _score(episodes) -> np.ndarray:
    length = np.asarray(episodes["length"], float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(length > 0, np.asarray(episodes["return"], float) / length, np.nan)


def _anchors(params: CcParams) -> Anchors:
    return Anchors(
        floor="constant_rate", ceiling="oracle",
        description=(f"Floor = a sender fixed at {params.constant_rate:g} packets/s (no "
                     "adaptation), ceiling = the oracle that sends at the link's current "
                     "bandwidth, each evaluated on the same test set with the same env "
                     "parameters; 1 means as good as knowing the link."))


SPEC = EnvSpec(
    name="cc",
    description="congestion control, Aurora setting: fluid PCC-RL link, rate-change actions",
    datasets={name: dataset.description for name, dataset in CC_DATASETS.items()},
    load_builtin=load_cc_dataset,
    deployment=_deployment,
    # The slices on upper layers, in their own files, loaded only by the layer that uses them:
    # deploy.py builds on plume.deploy, emulate.py on plume.emulation.
    deploy=lazy("plume.envs.cc.deploy", "DEPLOYMENTS"),
    emulation=Emulated(scenario=lazy("plume.envs.cc.emulate", "CcEmulation"),
                       metrics=("score", "throughput_mbps", "latency", "loss")),
    builtin_test_sets=lambda dataset: [dataset],
    trace_formats=("npz",),
    params=CcParams,
    required_channels=lambda params: ("bandwidth", "latency", "queue", "loss"),
    make=_make,
    single=_single,
    episode_fields=(
        Metric("return", "reward", True, "sum of Aurora rewards over the episode"),
        Metric("return_transformed", "reward", True,
               "sum of the agent's rewards (Aurora reward x env.reward_scale)"),
        Metric("length", "MIs", True, "monitor intervals played"),
        Metric("throughput", "packets/s", True, "mean throughput per monitor interval"),
        Metric("latency", "s", False, "mean RTT per monitor interval"),
        Metric("loss", "fraction", False, "mean loss ratio per monitor interval"),
        Metric("utilisation", "fraction", True,
               "packets delivered / link capacity offered over the episode"),
    ),
    score=Score("reward_per_mi", "reward per MI",
                "mean Aurora reward per monitor interval: 0.001 (10 throughput pkt/s - 1000 "
                "latency s - 2000 loss)", _score),
    anchors=_anchors,
    controllers={name: _controller(name) for name in ("constant_rate", "oracle", "aimd",
                                                       "cubic")},
    baseline_controller="cubic",  # Genet's CC baseline
    oracle_controller="oracle",
    # the paper clusters links on the raw tuple (no selection); a bandwidth series is
    # featurised as TraceBench's are, with the paper's CC cluster range
    analysis={"feature_set": "constants", "select": False, "k_range": (4, 9),
              "channel": "bandwidth", "resample_s": 0.0},
    dataset_analysis={"cc_series": {"feature_set": "tracebench", "select": True}},
    algo_preset="a2c_aurora",
    default_dataset=lambda params: "aurora",
    channel_help=("a CC trace is a link: constants latency (one-way s), queue (packets), "
                  "loss (fraction) and bandwidth (packets/s) as a constant or as a series "
                  "with time"),
    common_random_numbers=True,  # every draw goes through TraceVecEnv._draws
)
