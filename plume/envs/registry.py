"""The environment contract: one :class:`EnvSpec` per environment, the only thing the harness,
the schema, the evaluator and the report ever know of an environment (DESIGN.md, Contracts).

Adding an environment = its own package under ``plume/envs/`` exposing ``SPEC``, its config
file ``conf/env/<name>.yaml`` and one line in :data:`ENV_PACKAGES`. Nothing else changes.

A spec says which traces the environment replays (built-in datasets, trace-file formats,
required channels), how to build it (``make`` / ``single`` with its ``params`` schema), what a
finished test episode reports (``episode_fields``) and which single number reports compare
(``score``, normalised between two ``anchors``: fixed values or named classic controllers),
and what the environment suggests for Plume's analysis (``analysis``: the channel to featurise,
the candidate feature set, the cluster-count range).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from plume.traces.traceset import TraceSet

ENV_PACKAGES: dict[str, str] = {
    "tracebench": "plume.envs.tracebench",
    "abr": "plume.envs.abr",
}
"""Environment name -> the package whose ``SPEC`` attribute is its EnvSpec."""


@dataclass(frozen=True)
class Metric:
    """A per-episode field a finished test episode reports (a key of ``info["episode"]``)."""

    name: str
    unit: str
    higher_is_better: bool
    description: str


@dataclass(frozen=True)
class Score:
    """The one number per test episode that reports compare, computed from episode fields."""

    name: str
    unit: str
    description: str
    compute: Callable[[Mapping[str, np.ndarray]], np.ndarray]
    higher_is_better: bool = True


@dataclass(frozen=True)
class Anchors:
    """Normalisation: score 0 at ``floor``, 1 at ``ceiling``. Each is a fixed score value or
    the name of a classic controller whose mean score on the same test set is used."""

    floor: float | str
    ceiling: float | str
    description: str

    def controller_names(self) -> list[str]:
        return [a for a in (self.floor, self.ceiling) if isinstance(a, str)]


@dataclass(frozen=True)
class EnvSpec:
    """Everything the harness may know of one environment (see the module docstring).

    Attributes:
        name: the ``env.name`` value.
        description: one line for listings.
        datasets: built-in dataset name -> one-line description.
        load_builtin: ``(dataset, split) -> TraceSet`` for a built-in dataset.
        builtin_test_sets: built-in training dataset -> the test sets evaluated by default.
        trace_formats: ``env.trace_format`` values this environment can replay.
        params: dataclass schema of the environment's own ``env.*`` keys.
        required_channels: ``params -> channel names`` every trace must carry.
        make: ``(traces, n_envs, sampler, *, mode, seed, params) -> VectorEnv``
            (same-step autoreset; ``n_envs=None`` in test mode = one copy per trace).
        single: ``(traces, sampler, *, mode, seed, params) -> gymnasium.Env``.
        episode_fields: the per-episode fields recorded in ``eval.parquet``.
        score: the reported score.
        anchors: ``params -> Anchors`` (the normalisation written into every run).
        controllers: classic controller name -> ``params -> policy`` with a batched
            ``act(obs) -> actions``, evaluated exactly like a learned policy.
        analysis: defaults for the analysis keys a config leaves null (``channel``,
            ``feature_set``, ``k_range``, ``resample_s``).
        algo_preset: the ``conf/algo`` option this environment trains with by default.
        default_dataset: ``params -> dataset`` used when ``env.dataset`` is null.
        channel_help: appended to a missing-channel error (what to do instead).
    """

    name: str
    description: str
    datasets: Mapping[str, str]
    load_builtin: Callable[[str, str], TraceSet]
    builtin_test_sets: Callable[[str], list[str]]
    trace_formats: tuple[str, ...]
    params: type
    required_channels: Callable[[Any], tuple[str, ...]]
    make: Callable[..., Any]
    single: Callable[..., Any]
    episode_fields: tuple[Metric, ...]
    score: Score
    anchors: Callable[[Any], Anchors]
    controllers: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    analysis: Mapping[str, Any] = field(default_factory=dict)
    algo_preset: str = "ppo"
    default_dataset: Callable[[Any], str] | None = None
    channel_help: str = ""

    def check_channels(self, traces: TraceSet, params: Any, source: str) -> None:
        """Raise ValueError naming ``source`` unless ``traces`` carries every required channel."""
        missing = [c for c in self.required_channels(params) if not traces.has(c)]
        if missing:
            raise ValueError(
                f"{source}: env {self.name!r} needs channel(s) {', '.join(missing)}; the traces "
                f"have {', '.join(traces.channel_names) or 'none'}"
                + (f"; {self.channel_help}" if self.channel_help else ""))

    def episode_columns(self, episodes: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The recorded fields of finished episodes plus their ``score`` column."""
        columns = {m.name: np.asarray(episodes[m.name], dtype=np.float64)
                   for m in self.episode_fields}
        columns["score"] = np.asarray(self.score.compute(episodes), dtype=np.float64)
        return columns


def env_names() -> list[str]:
    """Every registered environment name."""
    return sorted(ENV_PACKAGES)


def get_env(name: str) -> EnvSpec:
    """The EnvSpec registered as ``name``; ValueError lists the valid names."""
    if name not in ENV_PACKAGES:
        raise ValueError(f"env={name!r} is not known; valid choices: {', '.join(env_names())}")
    spec = importlib.import_module(ENV_PACKAGES[name]).SPEC
    if not isinstance(spec, EnvSpec) or spec.name != name:
        raise TypeError(f"{ENV_PACKAGES[name]}.SPEC must be the EnvSpec named {name!r}")
    return spec
