"""Load balancing: Park's ``load_balance`` setting as the Plume paper used it (paper §3.5),
registered as ``env=lb``.

Jobs of a trace (``plume.traces.lb``: built-in ``lb_mixed``, ``park``, ``lb_balanced``, or CSV
``arrival_time,size`` files) arrive one per step; the agent picks one of 10 heterogeneous FIFO
servers (Park's rates 0.15 ... 1.05) for each. The reward is minus the time integral of the
jobs in the system, so a return is minus the total job completion time; the reported score is
the **negative mean job completion time** (higher is better), normalised per test set between
the random controller (0) and least-work-left (1). Simulator: ``sim.py``; Park's event loop
written out literally: ``reference.py``; classic controllers: ``controllers.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from plume.envs.lb.controllers import CONTROLLERS
from plume.envs.lb.sim import OBS_HIGH, LbEnv, LbVecEnv
from plume.envs.registry import Anchors, EnvSpec, Metric, Score, lazy
from plume.traces.lb import LB_DATASETS, PARK_RATES, load_lb_dataset

__all__ = ["SPEC", "LbEnv", "LbParams", "LbVecEnv"]


@dataclass
class LbParams:
    """``env.*`` keys of env=lb.

    Attributes:
        reward_scale: factor on the rewards ``step`` returns. The paper scaled LB rewards
            without saying by how much; 1e-3 brings least-work-left's median step reward
            (about -490 on Park's defaults) to about -0.5. The reported ``return`` and score
            are always raw.
        obs_scale: factor on the observation; 1 = Park's raw loads and sizes (up to 5e5),
            1e-3 = thousands of work units, a range an MLP learns on.
        obs_high: clipping bound of the raw observation (Park's ``load_balance_obs_high``).
        service_rates: work units per time unit of each server; the action picks one.
    """

    reward_scale: float = 1e-3
    obs_scale: float = 1e-3
    obs_high: float = OBS_HIGH
    service_rates: list[float] = field(default_factory=lambda: list(PARK_RATES))

    def __post_init__(self) -> None:
        for name in ("reward_scale", "obs_scale", "obs_high"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"env.{name} must be a positive number, got {value!r}")
        rates = list(self.service_rates)
        if len(rates) < 2 or not all(math.isfinite(r) and r > 0 for r in rates):
            raise ValueError(f"env.service_rates must list at least 2 positive rates, got "
                             f"{rates!r}")

    def sim_kwargs(self) -> dict:
        return {"service_rates": tuple(self.service_rates), "reward_scale": self.reward_scale,
                "obs_scale": self.obs_scale, "obs_high": self.obs_high}


def _deployment(params: LbParams) -> dict:
    """What a deployed balancer needs (``contract.json``)."""
    from plume.envs.lb.observation import describe_park

    rates = [float(r) for r in params.service_rates]
    return {"observation": describe_park(len(rates), params.obs_high, params.obs_scale),
            "action": {"kind": "discrete", "n": len(rates),
                       "meaning": "index of the server the arriving job joins (FIFO, "
                                  "non-preemptive; service time int(size / rate))",
                       "service_rates": rates},
            "constants": {"n_servers": len(rates), "obs_high": params.obs_high,
                          "obs_scale": params.obs_scale, "service_rates": rates}}


def _make(traces, n_envs, sampler, *, mode, seed, params: LbParams):
    return LbVecEnv(traces, n_envs, sampler, mode=mode, seed=seed, **params.sim_kwargs())


def _single(traces, sampler=None, *, mode="train", seed=None, params=None):
    return LbEnv(traces, sampler, mode=mode, seed=seed, **(params or LbParams()).sim_kwargs())


def _neg_mean_jct(episodes) -> np.ndarray:
    return -np.asarray(episodes["mean_jct"], dtype=np.float64)


SPEC = EnvSpec(
    name="lb",
    description="load balancing (Park): 10 heterogeneous FIFO servers, one job per step",
    datasets={name: dataset.description for name, dataset in LB_DATASETS.items()},
    load_builtin=load_lb_dataset,
    builtin_test_sets=lambda dataset: [dataset] if dataset == "park" else [dataset, "park"],
    trace_formats=("csv", "npz"),
    params=LbParams,
    required_channels=lambda params: ("interarrival", "job_size"),
    make=_make,
    single=_single,
    episode_fields=(
        Metric("return", "time units x jobs", True,
               "sum of raw rewards = minus the sum of job completion times"),
        Metric("return_transformed", "reward", True, "sum of the agent's scaled rewards"),
        Metric("mean_jct", "time units", False, "mean job completion time (finish - arrival)"),
        Metric("mean_wait", "time units", False, "mean time a job waits before service"),
        Metric("max_queue", "jobs", False,
               "most jobs at one server when a job joined it (that job included)"),
        Metric("length", "jobs", True, "jobs scheduled"),
    ),
    score=Score("neg_mean_jct", "time units",
                "minus the mean job completion time (finish - arrival) over the trace's jobs",
                _neg_mean_jct),
    anchors=lambda params: Anchors(
        floor="random", ceiling="least_work_left",
        description=("Floor = uniformly random server choice (it overloads the slow servers: "
                     "mean JCT ~11,700 on the park test set), ceiling = least-work-left "
                     "(~750 there), each evaluated on the same test set with the same env "
                     "parameters; 1 = as good as least-work-left, above 1 better.")),
    controllers={name: (lambda params, build=build: build())
                 for name, build in CONTROLLERS.items()},
    baseline_controller="least_work_left",  # the anchors' ceiling, Park's strong heuristic
    analysis={"channel": "job_size", "resample_s": 0.0, "feature_set": "lb", "k_range": (3, 8),
              "selection": {"fraction": 0.5, "steps": 7, "central_rounding": "floor"}},
    algo_preset="ppo_lb",
    deployment=_deployment,
    deploy=lazy("plume.envs.lb.deploy", "DEPLOYMENTS"),  # builds on plume.deploy: loaded by it
    default_dataset=lambda params: "lb_mixed",
    channel_help=("LB traces are job sequences, series interarrival and job_size (CSV files "
                  "'arrival_time,size' with env.trace_format=csv)"),
    common_random_numbers=True,  # every draw goes through TraceVecEnv._draws
)
