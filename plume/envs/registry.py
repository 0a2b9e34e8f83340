"""The environment contract: one :class:`EnvSpec` per environment, the only thing the harness,
the schema, the evaluator and the report ever know of an environment
(docs/ARCHITECTURE.md, Contracts).

Adding an environment = its own package under ``plume/envs/`` exposing ``SPEC``, its config
file ``conf/env/<name>.yaml`` and one line in :data:`ENV_PACKAGES`. Nothing else changes. An
environment of a user's own, outside plume, needs no registry line: its config file (in a
config directory on Hydra's search path) names the module with ``package:``.

A spec says which traces the environment replays (built-in datasets, trace-file formats,
required channels), how to build it (``make`` / ``single`` with its ``params`` schema), what a
finished test episode reports (``episode_fields``) and which single number reports compare
(``score``, normalised between two ``anchors``: fixed values or named classic controllers),
and what the environment suggests for Plume's analysis (``analysis``: the channel to featurise,
the candidate feature set, the cluster-count range).

An environment is a vertical slice: besides the simulator, its own package declares what the
layers above ``envs`` do with it, and those layers look it up here, never by its name: its
deployment (``deployment``: the contract's observation, action and constants; ``deploy``: the
runtime's session and the replay's recorder per variant), its emulation (``emulation``: the
scenario ``plume-emulate`` plays and the gap's metrics), its networks (``networks``: feature
extractors by ``algo.network`` name) and its normalisation (``anchors``). A slice that builds on
an upper layer (a session on ``plume.deploy.sessions``, a scenario on ``plume.emulation``, a
network on torch) lives in its own file of the env package (``deploy.py``, ``emulate.py``,
``networks.py``) that only that layer imports: the spec names it through a zero-arg loader
(:func:`lazy`), so importing an environment never imports deploy, emulation, agents or torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from plume.traces.traceset import TraceSet
from plume.user_modules import import_user_module

ENV_PACKAGES: dict[str, str] = {
    "tracebench": "plume.envs.tracebench",
    "abr": "plume.envs.abr",
    "cc": "plume.envs.cc",
    "lb": "plume.envs.lb",
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
class Deployment:
    """One variant's runtime slice (``EnvSpec.deploy``), classes of the environment's own
    package (``plume/envs/<env>/deploy.py``) that the deploy layer builds without naming them.

    Attributes:
        session: ``session(constants, **options)`` (constants: the contract's ``constants``
            updated by its ``action``): raw measurements -> the simulator's observation
            (``reset(**start)``, ``observe(measurement)`` -> (1, obs_dim), ``action(a)`` -> the
            real system's units); ``options`` are what ``load_controller`` passes on
            (``clip_bps``, for a session that takes it).
        recorder: ``recorder(env, traces, contract)``: what a real client would measure in the
            simulator (``start(i)`` -> (reset kwargs, first measurement); ``after(i, step,
            action)`` -> (the decision in the real system's units or None, the next
            measurement); ``step``: the env's ``last_step()`` plus ``observation`` and
            ``done``), for ``plume.deploy.replay``.
        protocols: the ``plume-serve`` adapters whose protocol this session speaks
            (``"pensieve"``, ``"puffer"``, ``"pcc"``); an adapter refuses other exports.
    """

    session: type
    recorder: type
    protocols: tuple[str, ...] = ()


@dataclass(frozen=True)
class Emulated:
    """What ``plume-emulate`` plays for an environment (``EnvSpec.emulation``).

    Attributes:
        scenario: zero-arg loader of the scenario class (``plume.emulation.scenarios``'
            ``Emulation`` protocol, with a ``check(params)`` static method), kept in the env's
            ``emulate.py``: it builds on the emulation layer.
        metrics: the ``eval.parquet`` columns the sim-to-emulation gap compares (``score``
            first: the env's score).
    """

    scenario: Callable[[], type]
    metrics: tuple[str, ...]


def lazy(module: str | Path, attribute: str) -> Callable[[], Any]:
    """A zero-arg loader of ``module``'s ``attribute``, imported at the first call: how a spec
    names a slice that builds on a layer above ``envs`` (an env package must not import deploy,
    emulation, agents or torch when it is imported). ``module``: a dotted module path, or a
    ``.py`` file (a user's environment naming the files beside it)."""
    def load() -> Any:
        path = Path(module)
        if path.suffix != ".py":
            return getattr(importlib.import_module(str(module)), attribute)
        # named after its folder too: two user envs may each have a deploy.py
        prefix = f"plume_user_env_{path.parent.name}"
        return getattr(import_user_module(str(path), "env.package", prefix), attribute)

    return load


@dataclass
class NoParams:
    """The ``params`` of an environment without ``env.*`` keys of its own."""


def _single_copy(make, params_type, traces, sampler=None, *, mode="train", seed=None,
                 params=None):
    """The default ``EnvSpec.single``: one copy of ``make``'s batched env, no autoreset."""
    from plume.envs.single import SingleCopyEnv

    params = params_type() if params is None else params
    return SingleCopyEnv(make(traces, 1, sampler, mode=mode, seed=seed, params=params))


@dataclass(frozen=True)
class EnvSpec:
    """Everything the harness may know of one environment (see the module docstring).

    Attributes:
        name: the ``env.name`` value.
        description: one line for listings.
        datasets: built-in dataset name -> one-line description.
        load_builtin: ``(dataset, split) -> TraceSet`` for a built-in dataset.
        builtin_test_sets: built-in training dataset -> the test sets evaluated by default
            (default: the dataset's own test split).
        trace_formats: ``env.trace_format`` values this environment can replay.
        params: dataclass schema of the environment's own ``env.*`` keys (default: none).
        required_channels: ``params -> channel names`` every trace must carry.
        make: ``(traces, n_envs, sampler, *, mode, seed, params) -> VectorEnv``
            (same-step autoreset; ``n_envs=None`` in test mode = one copy per trace).
        single: ``(traces, sampler, *, mode, seed, params) -> gymnasium.Env`` (default: a
            :class:`~plume.envs.single.SingleCopyEnv` over ``make`` with one copy).
        episode_fields: the per-episode fields recorded in ``eval.parquet``.
        score: the reported score.
        anchors: ``params -> Anchors`` (the normalisation written into every run).
        controllers: classic controller name -> ``params -> policy``: a callable batched
            ``policy(obs) -> actions``, evaluated exactly like a learned policy; or, for a
            controller that needs simulator state beyond the observation (CC's oracle rate,
            AIMD's RTT and losses, LB's queue lengths), an object with ``bind(env) ->
            policy`` that the evaluator calls on each test env before playing; the env
            offers that state through public read-only methods, never private attributes.
        baseline_controller: the rule-based controller curriculum samplers measure the
            policy against by default (Genet's gap-to-baseline, CL2's difficulty); None: the
            sampler must name one (``sampler.baseline``).
        oracle_controller: a controller that knows the trace (CC's link-rate oracle), CL2's
            default reference; None: the best of all controllers on each trace.
        analysis: defaults for the analysis keys a config leaves null (``channel``,
            ``feature_set``, ``k_range``, ``resample_s``, ``select``, ``selection``).
        dataset_analysis: built-in dataset -> the analysis defaults that differ for it (CC's
            link tuples are featurised as raw constants, its bandwidth series as series);
            see :meth:`analysis_for`.
        algo_preset: the ``conf/algo`` option this environment trains with when no ``algo=``
            is chosen: a name, or ``params -> name`` (a preset per variant); the one place an
            environment's default learner is declared (see :meth:`default_algo`).
        default_dataset: ``params -> dataset`` used when ``env.dataset`` is null (default: the
            first built-in dataset).
        channel_help: appended to a missing-channel error (what to do instead).
        deployment: ``params -> dict`` with the ``observation`` (layout and every field: name,
            unit, position, history, normalisation), the ``action`` (its meaning in the real
            system's units) and the ``constants`` a deployed controller needs, written into an
            export's ``contract.json``; None: the environment has no deployment description
            (its policies still export, with the observation documented as its space only).
        deploy: zero-arg loader (:func:`lazy`) of ``{variant: Deployment}`` (the key is
            ``params.variant``, None for an environment without variants): the runtime's
            session and the replay's recorder; None, or a variant missing: observations only
            (``DeployedController.act_observation``).
        emulation: what ``plume-emulate`` plays (:class:`Emulated`); None: not emulated.
        networks: ``algo.network`` name -> zero-arg loader of a feature extractor class,
            built as ``cls(obs_dim)`` -> a torch module with an ``out_dim`` (the learners put
            their heads on top); ``mlp`` is the agents' own and needs no entry.
        common_random_numbers: every random draw of the environment goes through
            ``TraceVecEnv._draws`` and ``_restart`` passes ``_draw`` its ids, so
            ``train.crn`` can key them by trace and visit (``plume.envs.draws``); False:
            ``train.crn`` is refused for it.
    """

    name: str
    description: str
    datasets: Mapping[str, str]
    load_builtin: Callable[[str, str], TraceSet]
    make: Callable[..., Any]
    episode_fields: tuple[Metric, ...]
    score: Score
    anchors: Callable[[Any], Anchors]
    builtin_test_sets: Callable[[str], list[str]] = field(default=lambda dataset: [dataset])
    trace_formats: tuple[str, ...] = ("npz",)
    params: type = field(default_factory=lambda: NoParams)
    required_channels: Callable[[Any], tuple[str, ...]] = field(default=lambda params: ())
    single: Callable[..., Any] | None = None
    controllers: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    baseline_controller: str | None = None
    oracle_controller: str | None = None
    analysis: Mapping[str, Any] = field(default_factory=dict)
    dataset_analysis: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    algo_preset: str | Callable[[Any], str] = "ppo"
    default_dataset: Callable[[Any], str] | None = None
    channel_help: str = ""
    deployment: Callable[[Any], dict[str, Any]] | None = None
    deploy: Callable[[], Mapping[str | None, Deployment]] | None = None
    emulation: Emulated | None = None
    networks: Mapping[str, Callable[[], type]] = field(default_factory=dict)
    common_random_numbers: bool = False

    def __post_init__(self) -> None:
        if self.single is None:
            object.__setattr__(self, "single", partial(_single_copy, self.make, self.params))
        if self.default_dataset is None:
            first = next(iter(self.datasets))
            object.__setattr__(self, "default_dataset", lambda params: first)
        for role in ("baseline_controller", "oracle_controller"):
            named = getattr(self, role)
            if named is not None and named not in self.controllers:
                raise ValueError(f"EnvSpec {self.name!r}: {role} {named!r} is not one of its "
                                 f"controllers ({', '.join(self.controllers) or 'none'})")

    def check_channels(self, traces: TraceSet, params: Any, source: str) -> None:
        """Raise ValueError naming ``source`` unless ``traces`` carries every required channel."""
        missing = [c for c in self.required_channels(params) if not traces.has(c)]
        if missing:
            raise ValueError(
                f"{source}: env {self.name!r} needs channel(s) {', '.join(missing)}; the traces "
                f"have {', '.join(traces.channel_names) or 'none'}"
                + (f"; {self.channel_help}" if self.channel_help else ""))

    def default_algo(self, params: Any) -> str:
        """The ``conf/algo`` preset this environment trains with under ``params`` when the
        config leaves the algorithm to it (``algo=auto``, the default)."""
        preset = self.algo_preset(params) if callable(self.algo_preset) else self.algo_preset
        return str(preset)

    def analysis_for(self, dataset: str) -> dict[str, Any]:
        """The analysis defaults for ``dataset``: :attr:`analysis` updated by the dataset's
        entry of :attr:`dataset_analysis` (a path to trace files takes :attr:`analysis`)."""
        return {**self.analysis, **self.dataset_analysis.get(dataset, {})}

    def deployment_for(self, variant: str | None) -> Deployment | None:
        """The runtime slice of ``variant`` (a contract's ``env.variant``), or None."""
        return None if self.deploy is None else self.deploy().get(variant)

    def episode_columns(self, episodes: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The recorded fields of finished episodes plus their ``score`` column."""
        columns = {m.name: np.asarray(episodes[m.name], dtype=np.float64)
                   for m in self.episode_fields}
        columns["score"] = np.asarray(self.score.compute(episodes), dtype=np.float64)
        return columns


def env_names() -> list[str]:
    """Every registered environment name."""
    return sorted(ENV_PACKAGES)


def declared_networks() -> dict[str, Callable[[], type]]:
    """Every network the registered environments declare (``EnvSpec.networks``), by name:
    how the agents layer resolves ``algo.network`` without knowing any environment.
    ValueError when two environments declare one name."""
    found: dict[str, tuple[str, Callable[[], type]]] = {}
    for env in ENV_PACKAGES:
        for network, loader in get_env(env).networks.items():
            if network in found:
                raise ValueError(f"network {network!r} is declared by env {found[network][0]!r} "
                                 f"and env {env!r}")
            found[network] = (env, loader)
    return {network: loader for network, (_, loader) in found.items()}


def get_env(name: str, package: str | None = None) -> EnvSpec:
    """The EnvSpec registered as ``name``, or the ``SPEC`` of ``package`` (a dotted module path
    or a ``.py`` file: an environment defined outside plume, named by its ``env`` config's
    ``package`` key). ValueError lists the valid names; ImportError names the package."""
    if package:
        module = _import_package(str(package))
        where = str(package)
    elif name in ENV_PACKAGES:
        module = importlib.import_module(ENV_PACKAGES[name])
        where = ENV_PACKAGES[name]
    else:
        raise ValueError(f"env={name!r} is not known; valid choices: {', '.join(env_names())} "
                         "(or set env.package to the module defining its SPEC)")
    spec = getattr(module, "SPEC", None)
    if spec is None:
        raise ValueError(f"env.package={where!r} defines no SPEC (the EnvSpec of its "
                         "environment)")
    if not isinstance(spec, EnvSpec):
        raise ValueError(f"env.package={where!r}: SPEC is a {type(spec).__name__}, not an "
                         "EnvSpec")
    if spec.name != name:
        raise ValueError(f"env.package={where!r}: its SPEC is named {spec.name!r}, but "
                         f"env.name is {name!r} (set env.name={spec.name})")
    return spec


def _import_package(package: str):
    """Import a user's environment module (``env.package``)."""
    return import_user_module(package, "env.package", "plume_user_env")
