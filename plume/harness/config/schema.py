"""Structured-config schemas: every value of a composed job is checked here before work starts.

The YAML files under ``conf/`` stay plain (Hydra composes them); :func:`validate` merges each
section into its dataclass schema so that a wrong type, a misspelt key or an out-of-range value
fails with a message naming the key, before any dataset is built or any step is trained.
:func:`resolve_job` (plume-train) and :func:`resolve_eval` (plume-eval) then give what the
validated job runs with, as its run directory and tracker record it, without writing into the
composed config.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import asdict, dataclass, field, fields
from pathlib import PurePath
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from plume.agents import ALGORITHMS
from plume.agents.lockstep import lockstep_refusal
from plume.analysis import (
    AnalysisSettings,
    SelectionSettings,
)
from plume.envs.registry import get_env
from plume.harness.config.configdir import AUTO, UNSET, plume_hydra
from plume.harness.config.datasets import check_dataset, default_test_sets
from plume.harness.config.errors import ConfigError
from plume.harness.config.scored_controllers import sampler_controllers
from plume.sampling import SAMPLERS, import_sampler_package
from plume.sampling.checks import FieldError


@dataclass
class TrainSection:
    total_steps: int = 1_000_000
    eval_points: int = 20
    eval_at_start: bool = True
    torch_threads: int = 1
    progress_every_s: float = 10.0
    # Fraction of the training traces held out as the test set ``validation`` (0: none).
    validation: float = 0.0
    # Stop (state ``paused``) after the first evaluation at or past this fraction of the budget.
    stop_at: float = 1.0
    # Common random numbers: the env's draws keyed by (seed, trace, visit), plume.envs.draws.
    crn: bool = False
    # Seeds seed .. seed+K-1 trained together in this process (plume.agents.lockstep), each in
    # its own run directory; not in the fingerprint or the folder name.
    seeds_in_process: int = 1


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


@dataclass(frozen=True)
class AlgoDefault:
    """An ``algo`` left to the environment: its ``conf/algo`` preset and the ``algo`` node the
    job trains with (that preset's keys, the config's own keys on top), as ``algo=<preset>``
    with the same keys would compose it."""

    preset: str
    values: dict[str, Any]


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
    sampler: Any  # the sampler's CONFIG dataclass
    analysis: Any  # plume.analysis.AnalysisSettings
    logger: LoggerSection
    paths: PathsSection
    # algo=auto: the environment's preset the job trains with (None: the config named one)
    algo_default: Optional[AlgoDefault] = None


LOGGERS = ("wandb", "none")
WANDB_MODES = ("offline", "online", "disabled")


def typed_section(section: str, schema: type, node: Any, drop: tuple[str, ...] = (),
                  label: str = "") -> Any:
    """Merge ``node`` into ``schema``; unknown keys and wrong types raise ConfigError. A
    schema check that names its field (FieldError) is reported as ``<section>.<field>: ``,
    then ``label`` (what the section chose, e.g. ``sampler=plume_dynamic``) if given."""
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
    except FieldError as err:  # a schema's own __post_init__ check, naming its field
        raise ConfigError(f"{section}.{err.field}: {label}{': ' if label else ''}{err}") from None
    except (TypeError, ValueError) as err:  # raised by a schema's own __post_init__ checks
        raise ConfigError(f"{section}: {label}{': ' if label else ''}{err}") from None


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
    if not 0 <= train.validation < 1:
        raise ConfigError(f"train.validation must be a fraction in [0, 1), got {train.validation}")
    if not 0 < train.stop_at <= 1:
        raise ConfigError(f"train.stop_at must be a fraction in (0, 1], got {train.stop_at}")

    # train.validation > 0: the held-out traces are the only test set, env.test_sets is unread
    env, spec, env_params = env_section(cfg.get("env"), test_sets=train.validation == 0)
    if train.crn and not spec.common_random_numbers:
        raise ConfigError(f"train.crn: env {spec.name!r} does not declare that its random draws "
                          "go through TraceVecEnv._draws (EnvSpec.common_random_numbers), so "
                          "they cannot be keyed by trace and visit; run it with train.crn=false")

    algo_name, algo, algo_default = algo_section(cfg.get("algo"), spec, env_params)

    sampler_name, sampler = sampler_section(cfg.get("sampler"))

    try:
        sampler_controllers(spec, sampler_name, asdict(sampler))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if (SAMPLERS[sampler_name].needs(sampler).learner_signal
            and ALGORITHMS[algo_name].LEARNER_SIGNAL is None):
        givers = sorted(n for n, a in ALGORITHMS.items() if a.LEARNER_SIGNAL is not None)
        raise ConfigError(f"sampler={sampler_name} with these settings scores episodes with the "
                          f"learner's signal, which algo={algo_name} does not give; algorithms "
                          f"that do: {', '.join(givers)}")
    analysis = analysis_settings(cfg.get("analysis"), spec.analysis_for(env.dataset))

    logger = typed_section("logger", LoggerSection, cfg.get("logger"))
    _choice("logger", logger.name, LOGGERS)
    _choice("logger.mode", logger.mode, WANDB_MODES)
    _check_seeds_in_process(train.seeds_in_process, algo_name, algo)

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
        sampler=sampler,
        analysis=analysis,
        logger=logger,
        paths=paths,
        algo_default=algo_default,
    )


def _check_seeds_in_process(count: int, algo_name: str, algo: Any) -> None:
    """``train.seeds_in_process``: at least 1; above 1 only for a learner that can be trained
    together with other seeds."""
    if count < 1:
        raise ConfigError(f"train.seeds_in_process must be >= 1, got {count}")
    refusal = lockstep_refusal(ALGORITHMS[algo_name], algo) if count > 1 else None
    if refusal:
        raise ConfigError(f"train.seeds_in_process={count}: {refusal}; train.seeds_in_process=1 "
                          "runs one seed per process")


def check_inside_root(root: str, **names: str) -> None:
    """Each named value becomes folders under ``root``: it must stay there (relative, no
    ``..``), checked on the text before any folder exists."""
    for key, value in names.items():
        parts = PurePath(str(value)).parts
        if not parts or PurePath(str(value)).is_absolute() or ".." in parts:
            raise ConfigError(f"{key}={value!r} would put run folders outside paths.root="
                              f"{root!r}: use a plain name (relative, without '..')")


def resolve_env_defaults(cfg: DictConfig, env: EnvSection) -> None:
    """Write the dataset and test sets a null chose into ``cfg.env`` (:func:`resolve_job`'s
    copy of the composed config), so the run directory's ``config.yaml`` says what was
    trained and tested on."""
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.env.dataset = env.dataset
        cfg.env.test_sets = list(env.test_sets)


def algo_section(node: Any, spec: Any,
                 env_params: Any) -> tuple[str, Any, Optional[AlgoDefault]]:
    """The algorithm's name, its typed config and, for an ``algo`` left to the environment
    (``algo=auto``: ``name: auto`` and unset keys), the preset chosen by
    ``EnvSpec.default_algo(params)`` (None when the config names its algorithm)."""
    if node is None:
        raise ConfigError("config section 'algo' is missing")
    values = (OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig)
              else dict(node))
    default = None
    if values.get("name") == AUTO or UNSET in values.values():
        preset = spec.default_algo(env_params)
        given = {k: v for k, v in values.items() if v != UNSET and (k, v) != ("name", AUTO)}
        default = AlgoDefault(preset, {**load_algo_preset(preset, spec.name), **given})
        values = default.values
    try:
        algo_name = _choice("algo.name", str(values.get("name")), tuple(ALGORITHMS))
        algo = typed_section("algo", ALGORITHMS[algo_name].CONFIG, values, drop=("name",))
    except ConfigError as err:
        if default is None:
            raise
        raise ConfigError(f"{err} (no algo= given: env {spec.name} trains with "
                          f"algo={default.preset})") from None
    return algo_name, algo, default


def load_algo_preset(preset: str, env_name: str = "") -> dict[str, Any]:
    """The ``algo`` node ``algo=<preset>`` composes, composed by Hydra itself (its compose API:
    in a running app on the app's config search path, elsewhere on ``conf/``), so a preset's
    defaults list means what Hydra makes of it."""
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return _composed_preset(preset, env_name)
    with plume_hydra():
        return _composed_preset(preset, env_name)


def _composed_preset(preset: str, env_name: str) -> dict[str, Any]:
    """:func:`load_algo_preset` with Hydra initialised; ConfigError (one line) for a preset
    the ``algo`` group lacks or one that does not compose."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    presets = [p for p in GlobalHydra.instance().config_loader().get_group_options("algo")
               if p != AUTO]
    if preset not in presets:
        raise ConfigError(f"env {env_name!r} trains with algo preset {preset!r} by default "
                          "(EnvSpec.algo_preset), which conf/algo does not have; name the "
                          f"learner with algo=<preset>: {', '.join(presets)}")
    try:
        node = compose(config_name=f"algo/{preset}").algo
    except HydraException as err:
        raise ConfigError(f"algo preset {preset!r} (env {env_name!r}'s default) does not "
                          f"compose: {' '.join(str(err).split())}") from None
    return OmegaConf.to_container(node, resolve=True)


def resolve_algo_default(cfg: DictConfig, job: JobConfig) -> None:
    """Write the preset an ``algo=auto`` job trains with into ``cfg.algo`` (a copy, as
    above), so the run directory's ``config.yaml`` names the real algorithm with every value
    it trained with."""
    from omegaconf import open_dict

    if job.algo_default is not None:
        with open_dict(cfg):
            cfg.algo = job.algo_default.values


def sampler_section(node: Any) -> tuple[str, Any]:
    """The sampler's name and its ``CONFIG`` instance, checked by the config's own
    ``__post_init__`` (errors name ``sampler.<key>``). ``sampler.package`` (a user's module or
    ``.py`` file) is imported first: it registers the sampler ``sampler.name`` may name."""
    if node is None:
        raise ConfigError("config section 'sampler' is missing")
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    values = dict(values)
    package = values.pop("package", None)
    if package:
        try:
            import_sampler_package(str(package))
        except ImportError as err:
            raise ConfigError(str(err)) from None
    name = str(values.get("name"))
    if name not in SAMPLERS:
        raise ConfigError(f"sampler.name={name!r} is not known; valid choices: "
                          f"{', '.join(sorted(SAMPLERS))} (or set sampler.package to the "
                          "module that registers it)")
    cls = SAMPLERS[name]
    accepted = [f.name for f in fields(cls.CONFIG) if f.init]
    unknown = sorted(set(values) - {"name", *accepted})
    if unknown:
        raise ConfigError(
            f"sampler '{name}' has no parameter(s) {', '.join(unknown)}; "
            f"it accepts: {', '.join(accepted) or 'none'}"
        )
    return name, typed_section("sampler", cls.CONFIG, values, drop=("name",),
                               label=f"sampler={name}")


def resolve_sampler_defaults(cfg: DictConfig, job: JobConfig) -> None:
    """Write the options a job's sampler takes by default into ``cfg.sampler`` (a copy, as
    above; those the config left out), so the run directory's ``config.yaml`` says what was
    trained with."""
    from omegaconf import open_dict

    options = asdict(job.sampler)
    with open_dict(cfg):
        for key in (f.name for f in fields(job.sampler) if f.init):  # the keys it accepts
            if key not in cfg.sampler:
                cfg.sampler[key] = options[key]



@dataclass(frozen=True)
class ResolvedJob:
    """What a validated job runs with, the only description of it the apps record: ``config``
    (the composed config with what its validation chose written in, resolved: the run
    directory's ``config.yaml`` and W&B's config), ``yaml`` (that file's text), the run
    ``fingerprint`` that checkpoints and resumes match on (None for plume-eval, which keeps no
    checkpoint) and the config-group ``choices`` (``algo=auto`` named by its preset)."""

    config: dict[str, Any]
    yaml: str
    fingerprint: str | None
    choices: dict[str, str]

    @property
    def wandb_config(self) -> dict[str, Any]:
        """W&B's run config: the resolved config (a copy: the tracker may keep and change it)."""
        return copy.deepcopy(self.config)


def resolve_job(cfg: DictConfig, job: JobConfig,
                choices: dict[str, str] | None = None) -> ResolvedJob:
    """plume-train's record of ``job`` (validated from ``cfg``, which is read, never written):
    the dataset, test sets, algorithm preset and sampler options that validation chose,
    written into a copy of the composed config, and Hydra's ``choices`` with the preset."""
    node = copy.deepcopy(cfg)
    resolve_env_defaults(node, job.env)
    resolve_algo_default(node, job)
    resolve_sampler_defaults(node, job)
    choices = dict(choices or {})
    if job.algo_default is not None and "algo" in choices:  # Hydra's choice was "auto"
        choices["algo"] = job.algo_default.preset
    return _resolved(node, config_fingerprint(node), choices)


def resolve_eval(cfg: DictConfig, env: EnvSection, spec: Any, controller: str) -> ResolvedJob:
    """plume-eval's record of a controller job checked by ``preflight.check_eval`` (its env
    section, EnvSpec and controller name): the dataset and test sets that a null chose,
    written into a copy of ``cfg``."""
    node = copy.deepcopy(cfg)
    resolve_env_defaults(node, env)
    return _resolved(node, None, {"env": spec.name, "controller": controller})


def _resolved(node: DictConfig, fingerprint: str | None,
              choices: dict[str, str]) -> ResolvedJob:
    """Resolved once as data (W&B's config) and once as text (config.yaml, byte for byte)."""
    return ResolvedJob(config=OmegaConf.to_container(node, resolve=True),
                       yaml=OmegaConf.to_yaml(node, resolve=True), fingerprint=fingerprint,
                       choices=choices)


FINGERPRINT_KEYS = ("env", "algo", "sampler", "analysis", "seed", "train.total_steps",
                    "train.eval_points", "train.eval_at_start", "train.validation", "train.crn")
"""What decides what a job trains (not where or how it logs). ``train.stop_at`` is not here: a
paused job resumed with a larger one is the same job."""


def config_fingerprint(cfg: DictConfig) -> str:
    """Hash of :data:`FINGERPRINT_KEYS` of a resolved config (:func:`resolve_job`'s, or a run
    directory's ``config.yaml``): a checkpoint resumes, or exports, only under the same one."""
    def resolved(key: str) -> Any:  # in place: a sampler key may read ${train.total_steps}
        node = OmegaConf.select(cfg, key)
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node

    chosen = {key: resolved(key) for key in FINGERPRINT_KEYS}
    for key in ("train.validation", "train.crn"):  # 0 / false (or absent): the hash of runs
        if not chosen[key]:                         # made before the key existed
            del chosen[key]
    return hashlib.sha256(repr(sorted(chosen.items())).encode()).hexdigest()[:16]

def env_section(node: Any, test_sets: bool = True) -> tuple[EnvSection, Any, Any]:
    """The generic ``env`` keys, the environment's EnvSpec and its own checked params; every
    dataset named is checked to exist (and to be readable by its trace format). With
    ``test_sets=False`` (a validation run) ``env.test_sets`` is neither checked nor kept."""
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
    if test_sets and env.test_sets is not None and not env.test_sets:
        raise ConfigError("env.test_sets is empty: name at least one test set (or null for "
                          "the dataset's own test split)")
    if env.dataset is None:
        env.dataset = spec.default_dataset(params)
    check_dataset(spec, env.dataset, env.trace_format, key="env.dataset")
    if not test_sets:
        env.test_sets = []
        return env, spec, params
    if env.test_sets is None:
        env.test_sets = default_test_sets(spec, env.dataset)
    for i, name in enumerate(env.test_sets):
        check_dataset(spec, name, env.trace_format, key=f"env.test_sets[{i}]")
    return env, spec, params


def analysis_settings(node: Any, env_defaults: Any = None):
    """The ``analysis`` section as ``plume.analysis.AnalysisSettings``, checked by its own
    constructor (its Literal-typed fields are beyond OmegaConf's structured configs). A key
    left null takes the environment's default (``EnvSpec.analysis``)."""

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
