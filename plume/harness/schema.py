"""Structured-config schemas: every value of a composed job is checked here before work starts.

The YAML files under ``conf/`` stay plain (Hydra composes them); :func:`validate` merges each
section into its dataclass schema so that a wrong type, a misspelt key or an out-of-range value
fails with a message naming the key, before any dataset is built or any step is trained.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field, fields
from pathlib import PurePath
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from plume.agents import ALGORITHMS
from plume.harness.datasets import check_dataset, default_test_sets
from plume.harness.errors import ConfigError
from plume.sampling import SAMPLERS


@dataclass
class TrainSection:
    total_steps: int = 1_000_000
    eval_points: int = 20
    eval_at_start: bool = True
    torch_threads: int = 1
    progress_every_s: float = 10.0


@dataclass
class EnvSection:
    """The keys every environment has; its own keys are checked by its EnvSpec's ``params``."""

    name: str = "tracebench"
    dataset: Optional[str] = None
    trace_format: Optional[str] = None
    n_envs: int = 64
    test_sets: Optional[list[str]] = None
    # An environment registered outside plume: the module exposing its SPEC (a dotted import
    # path, or a .py file); null for the built-in ones.
    package: Optional[str] = None
    # Trace files of different lengths are padded to the longest: refuse (one line naming
    # the longest trace) when n_traces x longest exceeds this many samples per channel
    # (2**24 = 128 MiB of float64); null for no limit.
    max_padded_samples: Optional[int] = 16_777_216


ENV_KEYS = tuple(f.name for f in fields(EnvSection))


@dataclass
class LoggerSection:
    name: str = "none"
    mode: str = "offline"
    project: str = "plume"
    entity: Optional[str] = None
    tags: list[str] = field(default_factory=list)


@dataclass
class PathsSection:
    root: str = "runs"
    cache: str = "runs/.cache/analysis"


@dataclass
class JobConfig:
    """The validated, typed view of one job's configuration."""

    exp_name: str
    seed: int
    overwrite: bool
    train: TrainSection
    env: EnvSection
    env_spec: Any  # plume.envs.registry.EnvSpec
    env_params: Any  # the spec's params dataclass
    algo_name: str
    algo: Any  # the algorithm's CONFIG dataclass
    sampler_name: str
    sampler_params: dict[str, Any]
    analysis: Any  # plume.analysis.AnalysisSettings
    logger: LoggerSection
    paths: PathsSection


LOGGERS = ("wandb", "none")
WANDB_MODES = ("offline", "online", "disabled")


def typed_section(section: str, schema: type, node: Any, drop: tuple[str, ...] = ()) -> Any:
    """Merge ``node`` into ``schema``; unknown keys and wrong types raise ConfigError."""
    if node is None:
        raise ConfigError(f"config section '{section}' is missing")
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    values = {k: v for k, v in dict(values).items() if k not in drop}
    known = {f.name for f in fields(schema)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(f'{section}.{k}' for k in unknown)}; "
            f"valid keys of '{section}': {', '.join(sorted(known))}"
        )
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), values)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        raise ConfigError(f"{section}.{key}: {err.msg if hasattr(err, 'msg') else err}") from None
    except (TypeError, ValueError) as err:  # raised by a schema's own __post_init__ checks
        raise ConfigError(f"{section}: {err}") from None


def _choice(section: str, value: str, valid: tuple[str, ...] | list[str]) -> str:
    if value not in valid:
        raise ConfigError(
            f"{section}={value!r} is not known; valid choices: {', '.join(sorted(valid))}"
        )
    return value


TOP_KEYS = ("exp_name", "seed", "overwrite", "train", "env", "algo", "sampler", "analysis",
            "logger", "paths")


def check_top_keys(cfg: DictConfig, known: tuple[str, ...]) -> None:
    """A key added with ``+`` (a typo Hydra's own hint suggests) must not pass unnoticed."""
    unknown = sorted(set(cfg.keys()) - set(known) - {"hydra"})
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {', '.join(unknown)}; valid keys: "
                          f"{', '.join(known)}")


def validate(cfg: DictConfig) -> JobConfig:
    """Check every section of a composed job config and return its typed view."""
    check_top_keys(cfg, TOP_KEYS)
    train = typed_section("train", TrainSection, cfg.get("train"))
    if train.total_steps <= 0:
        raise ConfigError(f"train.total_steps must be a positive step budget, got {train.total_steps}")
    if train.eval_points < 1:
        raise ConfigError(f"train.eval_points must be >= 1, got {train.eval_points}")
    if train.torch_threads < 1:
        raise ConfigError(f"train.torch_threads must be >= 1, got {train.torch_threads}")

    env, spec, env_params = env_section(cfg.get("env"))

    algo_node = cfg.get("algo")
    algo_name = _choice("algo.name", str(algo_node.get("name")), tuple(ALGORITHMS))
    algo = typed_section("algo", ALGORITHMS[algo_name].CONFIG, algo_node, drop=("name",))

    sampler_node = OmegaConf.to_container(cfg.get("sampler"), resolve=True)
    sampler_name = _choice("sampler.name", str(sampler_node.pop("name", None)), tuple(SAMPLERS))
    from plume.harness.samplers import DATA_INPUTS

    accepted = [
        p for p in inspect.signature(SAMPLERS[sampler_name].__init__).parameters
        if p not in ("self", "n_traces", "rng", *DATA_INPUTS)
    ]
    unknown = sorted(set(sampler_node) - set(accepted))
    if unknown:
        raise ConfigError(
            f"sampler '{sampler_name}' has no parameter(s) {', '.join(unknown)}; "
            f"it accepts: {', '.join(accepted) or 'none'}"
        )

    from plume.harness.samplers import check_sampler_params

    try:
        check_sampler_params(sampler_name, sampler_node)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"sampler={sampler_name}: {err}") from None
    from plume.harness.samplers import sampler_controllers

    try:
        sampler_controllers(spec, sampler_name, sampler_node)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if (SAMPLERS[sampler_name].needs_learner_signal(**sampler_node)
            and ALGORITHMS[algo_name].LEARNER_SIGNAL is None):
        givers = sorted(n for n, a in ALGORITHMS.items() if a.LEARNER_SIGNAL is not None)
        raise ConfigError(f"sampler={sampler_name} with these settings scores episodes with the "
                          f"learner's signal, which algo={algo_name} does not give; algorithms "
                          f"that do: {', '.join(givers)}")
    analysis = analysis_settings(cfg.get("analysis"), spec.analysis_for(env.dataset))

    logger = typed_section("logger", LoggerSection, cfg.get("logger"))
    _choice("logger", logger.name, LOGGERS)
    _choice("logger.mode", logger.mode, WANDB_MODES)

    paths = typed_section("paths", PathsSection, cfg.get("paths"))
    if not str(cfg.get("exp_name", "")).strip():
        raise ConfigError("exp_name must be a non-empty name")
    check_inside_root(paths.root, exp_name=cfg.exp_name)
    seed = cfg.get("seed")
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    return JobConfig(
        exp_name=str(cfg.exp_name),
        seed=seed,
        overwrite=bool(cfg.get("overwrite", False)),
        train=train,
        env=env,
        env_spec=spec,
        env_params=env_params,
        algo_name=algo_name,
        algo=algo,
        sampler_name=sampler_name,
        sampler_params=sampler_node,
        analysis=analysis,
        logger=logger,
        paths=paths,
    )


def check_inside_root(root: str, **names: str) -> None:
    """Each named value becomes folders under ``root``: it must stay there (relative, no
    ``..``), checked on the text before any folder exists."""
    for key, value in names.items():
        parts = PurePath(str(value)).parts
        if not parts or PurePath(str(value)).is_absolute() or ".." in parts:
            raise ConfigError(f"{key}={value!r} would put run folders outside paths.root="
                              f"{root!r}: use a plain name (relative, without '..')")


def resolve_env_defaults(cfg: DictConfig, env: EnvSection) -> None:
    """Write the dataset and test sets a null chose into ``cfg.env``, so the run directory's
    ``config.yaml`` says what was trained and tested on."""
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.env.dataset = env.dataset
        cfg.env.test_sets = list(env.test_sets)


def env_section(node: Any) -> tuple[EnvSection, Any, Any]:
    """The generic ``env`` keys, the environment's EnvSpec and its own checked params; every
    dataset named is checked to exist (and to be readable by its trace format)."""
    from plume.envs.registry import get_env

    if node is None:
        raise ConfigError("config section 'env' is missing")
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    values = dict(values)
    try:
        spec = get_env(str(values.get("name")), values.get("package"))
    except (ValueError, ImportError) as err:
        raise ConfigError(str(err)) from None
    own = {k: v for k, v in values.items() if k not in ENV_KEYS}
    known = {f.name for f in fields(spec.params)}
    unknown = sorted(set(own) - known)
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(f'env.{k}' for k in unknown)} for env={spec.name}; "
            f"valid keys: {', '.join(sorted(known | set(ENV_KEYS)))}")
    env = typed_section("env", EnvSection, {k: v for k, v in values.items() if k in ENV_KEYS})
    params = typed_section("env", spec.params, own)
    if env.n_envs < 1:
        raise ConfigError(f"env.n_envs must be >= 1, got {env.n_envs}")
    if env.max_padded_samples is not None and env.max_padded_samples < 1:
        raise ConfigError(f"env.max_padded_samples must be >= 1 or null, got "
                          f"{env.max_padded_samples}")
    if env.test_sets is not None and not env.test_sets:
        raise ConfigError("env.test_sets is empty: name at least one test set (or null for "
                          "the dataset's own test split)")
    if env.dataset is None:
        env.dataset = spec.default_dataset(params)
    check_dataset(spec, env.dataset, env.trace_format, key="env.dataset")
    if env.test_sets is None:
        env.test_sets = default_test_sets(spec, env.dataset)
    for i, name in enumerate(env.test_sets):
        check_dataset(spec, name, env.trace_format, key=f"env.test_sets[{i}]")
    return env, spec, params


def analysis_settings(node: Any, env_defaults: Any = None):
    """The ``analysis`` section as ``plume.analysis.AnalysisSettings``, checked by its own
    constructor (its Literal-typed fields are beyond OmegaConf's structured configs). A key
    left null takes the environment's default (``EnvSpec.analysis``)."""
    from plume.analysis import AnalysisSettings, SelectionSettings

    if node is None:
        raise ConfigError("config section 'analysis' is missing")
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    values = _fill_nulls(dict(values), dict(env_defaults or {}))
    selection = _construct("analysis.selection", SelectionSettings, values.pop("selection", {}))
    if isinstance(values.get("k_range"), list):
        values["k_range"] = tuple(values["k_range"])
    return _construct("analysis", AnalysisSettings, {**values, "selection": selection})


def _fill_nulls(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every null leaf replaced by the same key of ``defaults`` (recursively);
    a null with no default is dropped, so the schema's own default applies."""
    out = {}
    for key, value in values.items():
        default = defaults.get(key)
        if isinstance(value, dict):
            value = _fill_nulls(value, default if isinstance(default, dict) else {})
        elif value is None:
            value = default
        if value is not None:
            out[key] = value
    return out


def _construct(section: str, cls: type, values: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(f'{section}.{k}' for k in unknown)}; "
            f"valid keys of '{section}': {', '.join(sorted(known))}"
        )
    try:
        return cls(**values)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{section}: {err}") from None
