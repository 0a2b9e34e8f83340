"""``hydra/sweeper=plume_optuna``: hyperparameter search as a Hydra sweep on Optuna's ask/tell.

    plume-train -m hparams_search=abr hydra/launcher=joblib

The sweeper asks Optuna for ``n_jobs`` trials at a time (values for the keys of
``hydra.sweeper.params``) and runs each trial as ``seeds`` ordinary ``plume-train`` jobs,
rung by rung: at each rung it launches the jobs of the trials still running with
``train.stop_at=<rung>`` (a job pauses there and the next rung resumes it from its checkpoint;
the run directory is the same, ``train.stop_at`` being out of its name), reads each run's
``eval.parquet``, reports the trial's validation score (``plume.harness.integrations.tune``) and prunes or
keeps it; after the last rung the trial is told its value. A job refused or failed fails its
trial in one line; the search goes on and the command exits non-zero at the end.

Only this process touches the study, so any Hydra launcher runs the jobs (joblib, submitit,
ray). One sweeper process per study (a lock in the sweep folder refuses a second): killed, the
same command resumes the study; the trials it left running are failed and asked again with
the same values, whose jobs land in the same run directories (completed ones are not
launched again, paused or interrupted ones resume from their checkpoints). Before any trial,
every value of the space (each choice, both ends of each range) is composed and checked in a
job, and a damaged journal file is refused, read only, naming its first bad line.

Our own sweeper rather than hydra-optuna-sweeper 1.3.0: that plugin requires optuna<3, and its
SQLite storage breaks under SQLAlchemy 2. Built on Hydra's public plugin API only
(``hydra.plugins.sweeper.Sweeper``), like the ``plume`` sweeper whose helpers it reuses.
"""

import fcntl
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, RunMode, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.plume_sweeper.plume_sweeper import listed_jobs, make_launcher, without_hydra

APP = "plume-train"
LOCK = "optuna.lock"


@dataclass
class PlumeOptunaSweeperConf:
    _target_: str = ("hydra_plugins.plume_optuna_sweeper.plume_optuna_sweeper."
                     "PlumeOptunaSweeper")
    # The study's name in its storage.
    study_name: str = "${exp_name}"
    # An Optuna storage URL (e.g. sqlite:///study.db); null: the journal file
    # <sweep dir>/optuna.journal.
    storage: Optional[str] = None
    # maximize the validation score (every env's score is higher-is-better) or minimize it.
    direction: str = "maximize"
    # tpe (Optuna's TPESampler) or random; seeded with sampler_seed.
    sampler: str = "tpe"
    sampler_seed: int = 0
    # Trials TPE samples at random first, and that must complete before the median pruner
    # prunes any.
    n_startup_trials: int = 5
    # median (below the median of the completed trials at the same rung), successive_halving
    # (min resource: the first rung; reduction_factor) or none.
    pruner: str = "median"
    # The first rungs at which no trial is pruned.
    warmup_rungs: int = 0
    reduction_factor: int = 2
    # Trials to finish (complete or pruned; failed ones do not count).
    n_trials: int = 20
    # Trials asked and run at a time (their jobs go to the launcher together).
    n_jobs: int = 2
    # Jobs per trial: seeds 0..seeds-1.
    seeds: int = 2
    # A trial's value from its seeds' values: mean, worst (the lowest when maximizing) or
    # mean_minus_std (penalises a configuration that collapses on some seeds).
    objective: str = "mean"
    # Fractions of train.total_steps where trials are scored and pruned; each must be an
    # evaluation point of train.eval_points; the last is 1.0.
    rungs: List[float] = field(default_factory=lambda: [0.25, 0.5, 1.0])
    # The search space: config key -> {type: float|int|categorical, low, high, log, step,
    # choices}.
    params: Dict[str, Any] = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/sweeper", name="plume_optuna",
                             node=PlumeOptunaSweeperConf, provider="plume")


@dataclass
class Plan:
    """What the search needs beyond its settings, found before anything runs."""

    space: dict[str, Any]  # key -> plume.harness.integrations.tune.Param
    given: list[Any]  # the command line's overrides (Hydra Override objects)
    sweep_dir: Path
    preset: str  # the algo preset the jobs train with (best_algo.yaml extends it)
    total_steps: int
    validation: float
    groups: set[str]  # searched keys that are config groups (algo=..., sampler=...)


@dataclass(frozen=True)
class Refused:
    """Why a job of the search would not run: it does not compose, or its checks refuse it."""

    composes: bool
    reason: str

    def naming(self, key: str, what: str, value: Any) -> Exception:
        """The one line naming the search space's ``key`` and its ``value`` (a ``what``:
        choice, low or high) that makes every trial drawing it fail."""
        from plume.harness.config.errors import ConfigError  # deferred: Hydra imports every plugin when any app starts
        from plume.harness.integrations.tune import SPACE_KEY, override_value  # deferred: Hydra imports every plugin when any app starts

        verb = "is refused" if self.composes else "does not compose a job of this search"
        return ConfigError(f"{SPACE_KEY}.{key}: {what} {override_value(value)} {verb}: "
                           f"{self.reason}")

    def plain(self) -> Exception:
        from plume.harness.config.errors import ConfigError  # deferred: Hydra imports every plugin when any app starts

        return ConfigError(self.reason if self.composes
                           else f"a job of this search does not compose: {self.reason}")


@dataclass
class TrialRun:
    """One asked trial: its values, the override of each, its jobs' run directories."""

    trial: Any  # optuna.trial.Trial
    overrides: list[str]
    run_dirs: list[Path] = field(default_factory=list)
    total_steps: int = 0

    @property
    def number(self) -> int:
        return self.trial.number


class PlumeOptunaSweeper(Sweeper):
    """Optuna ask/tell over ``plume-train`` jobs (see the module docstring)."""

    def __init__(self, **settings: Any) -> None:
        super().__init__()
        self.settings = {k: (OmegaConf.to_container(v, resolve=True)
                             if OmegaConf.is_config(v) else v) for k, v in settings.items()}
        self.rungs: list[float] = []  # checked in sweep()
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None
        self.parser: OverridesParser | None = None
        self.job_index = 0

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = make_launcher(hydra_context, task_function, config)
        self.parser = OverridesParser.create(config_loader=hydra_context.config_loader)

    def sweep(self, arguments: list[str]) -> Any:
        from plume.harness.config.errors import ConfigError  # deferred: Hydra imports every plugin when any app starts
        from plume.harness.apps.sweep import SweepOutcome, refuse  # deferred: Hydra imports every plugin when any app starts
        from plume.harness.integrations.tune import JOURNAL, check_journal, open_study, recover  # deferred: Hydra imports every plugin when any app starts

        s = self.settings
        try:
            plan = self._plan(arguments)
            had_lock = (plan.sweep_dir / LOCK).exists()
            lock = _one_sweeper(plan.sweep_dir, s["study_name"])
        except ConfigError as err:
            refuse(APP, err, RunMode.RUN)  # one line, exit status 2: nothing has run
        try:
            if s["storage"] is None:  # read only, under the lock: no other sweeper writes it
                check_journal(plan.sweep_dir / JOURNAL)
        except ConfigError as err:  # the sweep folder is left as it was found
            if not had_lock:
                (plan.sweep_dir / LOCK).unlink(missing_ok=True)
            lock.close()
            refuse(APP, err, RunMode.RUN)
        try:
            OmegaConf.save(self.config, plan.sweep_dir / "multirun.yaml")
            outcome = SweepOutcome(APP, frozenset([*plan.space, "seed"]))
            study, where = open_study(s["study_name"], s["storage"], plan.sweep_dir,
                                      s["direction"], *self._sampler_pruner(plan))
            again = recover(study)
            print(f"study {study.study_name!r} in {where}"
                  + (f": trial(s) {', '.join(map(str, again))} of a killed sweep failed and "
                     "asked again" if again else ""), flush=True)
            self._search(study, plan, outcome)
            self._summary(study, where, plan)
        finally:
            lock.close()
        outcome.finish()

    def _plan(self, arguments: list[str]) -> Plan:
        """Settings, search space and every value of it checked in a job: ConfigError before
        anything runs."""
        from plume.harness.config.errors import ConfigError  # deferred: Hydra imports every plugin when any app starts
        from plume.harness.integrations.tune import check_settings, search_space  # deferred: Hydra imports every plugin when any app starts

        assert self.parser is not None and self.config is not None
        self.rungs = check_settings(self.settings)
        space = search_space(self.settings["params"])
        given = self.parser.parse_overrides(arguments)
        sweeps = [str(o.input_line) for o in given if o.is_sweep_override()]
        if sweeps:
            raise ConfigError(f"hydra/sweeper=plume_optuna searches hydra.sweeper.params; a "
                              f"sweep override cannot be added: {' '.join(sweeps)}")
        composed, inputs = self._check_space(given, space)
        job = inputs.job
        choice = OmegaConf.select(composed, "hydra.runtime.choices.algo")
        preset = job.algo_default.preset if job.algo_default is not None else str(choice)
        groups = set(self.hydra_context.config_loader.list_groups("")) & set(space)
        return Plan(space, list(given), Path(str(self.config.hydra.sweep.dir)), preset,
                    job.train.total_steps, job.train.validation, groups)

    def _check_space(self, given: list[Any], space: dict[str, Any]) -> tuple[DictConfig, Any]:
        """Every choice of every categorical and both ends of every range, each in a job
        composed and checked like a trial's (the other keys at their probe values): a value
        that would fail its trials is refused now, naming its key. Returns the probe job
        (each key's first choice or low end): its composed config and checked inputs."""
        probe = {key: param.probe() for key, param in space.items()}
        first = self._try_values(given, space, probe)
        if isinstance(first, Refused):  # whose probe value is it? One that another value fixes
            for key, param in space.items():
                if any(not isinstance(self._try_values(given, space, {**probe, key: v}), Refused)
                       for _, v in param.ends() if not _same(v, probe[key])):
                    raise first.naming(key, param.ends()[0][0], probe[key])
            raise first.plain()  # no one value to blame: the command line or the search file
        for key, param in space.items():
            for what, value in param.ends():
                if not _same(value, probe[key]):
                    tried = self._try_values(given, space, {**probe, key: value})
                    if isinstance(tried, Refused):
                        raise tried.naming(key, what, value)
        return first

    def _try_values(self, given: list[Any], space: dict[str, Any],
                    values: dict[str, Any]) -> Any:
        """(composed config, checked inputs) of the seed-0 job with ``values``, or Refused."""
        from plume.harness.config.errors import ConfigError  # deferred: Hydra imports every plugin when any app starts
        from plume.harness.integrations.tune import check_trial_job  # deferred: Hydra imports every plugin when any app starts

        overrides = [param.override(values[key]) for key, param in space.items()]
        try:
            composed = self._compose(self._job(given, overrides, 0, self.rungs[0]))
        except ConfigError as err:
            return Refused(False, str(err))
        try:
            return composed, check_trial_job(without_hydra(composed), self.rungs)
        except ConfigError as err:
            return Refused(True, str(err))

    def _sampler_pruner(self, plan: Plan) -> tuple[Any, Any]:
        from plume.harness.integrations.tune import make_pruner, make_sampler  # deferred: Hydra imports every plugin when any app starts

        s = self.settings
        return (make_sampler(s["sampler"], s["sampler_seed"], s["n_startup_trials"]),
                make_pruner(s["pruner"], s["n_startup_trials"],
                            round(self.rungs[0] * plan.total_steps), s["reduction_factor"]))

    def _job(self, given: list[Any], overrides: list[str], seed: int, rung: float) -> list[str]:
        """A job's overrides: the command line's (those the trial does not set), the trial's
        values, the seed and the rung it stops at."""
        assert self.parser is not None
        return listed_jobs([[*overrides, f"seed={seed}", f"train.stop_at={rung!r}"]], given,
                           self.parser)[0]

    def _compose(self, overrides: list[str]) -> DictConfig:
        """The job's config with Hydra's node (its run directory); ConfigError if it does not
        compose (a searched key the config does not have, a group option it lacks)."""
        from plume.harness.config.errors import ConfigError  # deferred: Hydra imports every plugin when any app starts

        assert self.hydra_context is not None and self.config is not None
        try:
            with warnings.catch_warnings():  # Hydra 1.3's schema-matching deprecation, per job
                warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/\w+' is "
                                        "validated against ConfigStore schema")
                return self.hydra_context.config_loader.load_sweep_config(
                    master_config=self.config, sweep_overrides=list(overrides))
        except HydraException as err:
            raise ConfigError(" ".join(str(err).split())) from None

    def _search(self, study: Any, plan: Plan, outcome: Any) -> None:
        """Batches of ``n_jobs`` trials until ``n_trials`` are finished (or as many failed in
        this sweep: a search whose trials all fail stops)."""
        from plume.harness.integrations.tune import finished  # deferred: Hydra imports every plugin when any app starts

        n_trials, failures = self.settings["n_trials"], 0
        while finished(study) < n_trials and failures < n_trials:
            size = min(self.settings["n_jobs"], n_trials - finished(study))
            batch = [self._ask(study, plan, outcome) for _ in range(size)]
            failures += sum(run is None for run in batch)
            failures += self._run_batch(study, [run for run in batch if run is not None], plan,
                                        outcome)
        if failures >= n_trials:
            print(f"stopping: {failures} trial(s) failed in this sweep", flush=True)

    def _ask(self, study: Any, plan: Plan, outcome: Any) -> TrialRun | None:
        """A new trial with its values and its checked jobs; None (told FAIL) when a job is
        refused before launch."""
        from optuna.trial import TrialState

        from plume.harness.integrations.tune import check_trial_job  # deferred: Hydra imports every plugin when any app starts

        trial = study.ask()
        run = TrialRun(trial, [p.override(p.suggest(trial)) for p in plan.space.values()])
        for seed in range(self.settings["seeds"]):
            overrides = self._job(plan.given, run.overrides, seed, self.rungs[0])
            composed: dict[str, DictConfig] = {}

            def compose(job: list[str], into: dict[str, DictConfig] = composed) -> DictConfig:
                into["cfg"] = self._compose(job)
                return without_hydra(into["cfg"])

            def check(cfg: DictConfig) -> None:
                run.total_steps = check_trial_job(cfg, self.rungs).job.train.total_steps

            if not outcome.check([overrides], compose, check):
                study.tell(trial, state=TrialState.FAIL)
                print(f"trial {trial.number}: failed: its seed {seed} job was refused (above)",
                      flush=True)
                return None
            hydra = composed["cfg"].hydra
            run.run_dirs.append(Path(os.path.abspath(Path(hydra.sweep.dir) / hydra.sweep.subdir)))
        for key, value in (("run_dirs", [str(d) for d in run.run_dirs]),
                           ("seeds", self.settings["seeds"]),
                           ("objective", self.settings["objective"]),
                           ("validation", plan.validation),
                           ("total_steps", run.total_steps), ("command", list(self._command))):
            trial.set_user_attr(key, value)
        return run

    @property
    def _command(self) -> list[str]:
        """The search's command line (cited in best.yaml)."""
        assert self.config is not None
        return [o for o in (*self.config.hydra.overrides.hydra, *self.config.hydra.overrides.task)
                if not o.startswith("hydra.mode=")]

    def _run_batch(self, study: Any, batch: list[TrialRun], plan: Plan, outcome: Any) -> int:
        """Run a batch rung by rung; the number of its trials that failed."""
        failures = 0
        for index, rung in enumerate(self.rungs):
            if not batch:
                break
            errors = self._launch(batch, rung, plan, outcome)
            scored = []
            for run in batch:
                value = self._score(study, run, rung, errors.get(run.number), outcome)
                if value is None:
                    failures += 1
                else:
                    scored.append((run, value))
            batch = self._decide(study, scored, index, rung)
        return failures

    def _launch(self, batch: list[TrialRun], rung: float, plan: Plan,
                outcome: Any) -> dict[int, str]:
        """Launch the jobs of ``batch`` that must train to ``rung`` (a run directory shared by
        trials with the same values once; a completed one not at all); trial -> error line."""
        from plume.runs.record import COMPLETED, run_state  # deferred: Hydra imports every plugin when any app starts

        jobs: dict[Path, list[str]] = {}
        for run in batch:
            for seed, run_dir in enumerate(run.run_dirs):
                if run_state(run_dir) != COMPLETED:
                    jobs.setdefault(run_dir, self._job(plan.given, run.overrides, seed, rung))
        if not jobs:
            return {}
        assert self.launcher is not None
        overrides = list(jobs.values())
        results = self.launcher.launch(overrides, initial_job_idx=self.job_index)
        self.job_index += len(overrides)
        lines = dict(zip(jobs, outcome.collect(overrides, results)))
        return {run.number: lines[d] for run in batch for d in run.run_dirs
                if lines.get(d) is not None}

    def _score(self, study: Any, run: TrialRun, rung: float, error: str | None,
               outcome: Any) -> float | None:
        """The trial's value at ``rung`` (reported to Optuna); None when it failed (told)."""
        from optuna.trial import TrialState

        from plume.harness.integrations.tune import rung_value, seed_objective  # deferred: Hydra imports every plugin when any app starts

        if error is None:
            try:
                seeds = [rung_value(d, rung) for d in run.run_dirs]
                value = seed_objective(seeds, self.settings["objective"],
                                       self.settings["direction"])
            except ValueError as err:  # a run without its score: the sweep exits non-zero
                error = f"{APP}: failed: {err}"
                outcome.failed.append(error)
                print(error, file=sys.stderr, flush=True)
        if error is not None:
            study.tell(run.trial, state=TrialState.FAIL)
            print(f"trial {run.number}: failed at rung {rung:g} (a job, above)", flush=True)
            return None
        values = {**run.trial.user_attrs.get("rung_values", {}), f"{rung:g}": value}
        run.trial.set_user_attr("rung_values", values)
        per_seed = {**run.trial.user_attrs.get("seed_values", {}), f"{rung:g}": seeds}
        run.trial.set_user_attr("seed_values", per_seed)
        run.trial.report(value, step=round(rung * run.total_steps))
        return value

    def _decide(self, study: Any, scored: list[tuple[TrialRun, float]], index: int,
                rung: float) -> list[TrialRun]:
        """Prune or keep each scored trial (tell the value at the last rung); the kept ones."""
        from optuna.trial import TrialState

        from plume.harness.integrations.tune import completed_median  # deferred: Hydra imports every plugin when any app starts

        kept = []
        last = index == len(self.rungs) - 1
        below = "<" if self.settings["direction"] == "maximize" else ">"
        pruner = self.settings["pruner"]
        for run, value in scored:
            if last:
                study.tell(run.trial, value)
                best = study.best_trial
                note = ("best so far" if best.number == run.number
                        else f"best: trial {best.number}, {best.value:.6g}")
                print(f"trial {run.number}: {value:.6g} ({note})", flush=True)
            elif index >= self.settings["warmup_rungs"] and run.trial.should_prune():
                median = completed_median(study, round(rung * run.total_steps))
                study.tell(run.trial, state=TrialState.PRUNED)
                why = (f"{below} median {median:.6g}" if pruner == "median" else
                       f"outside the top 1/{self.settings['reduction_factor']} of its rung")
                print(f"trial {run.number}: pruned at rung {rung:g} (value {value:.6g} {why})",
                      flush=True)
            else:
                kept.append(run)
        return kept

    def _summary(self, study: Any, where: str, plan: Plan) -> None:
        """Write ``<sweep dir>/study/`` (trials.csv, best.yaml, best_algo.yaml, figures) and
        print the study's summary and where its outputs are."""
        from optuna.trial import TrialState

        from plume.harness.integrations import tune  # deferred: Hydra imports every plugin when any app starts

        out = plan.sweep_dir / tune.STUDY_DIR
        out.mkdir(parents=True, exist_ok=True)
        tune.trials_table(study, plan.space, self.rungs).to_csv(out / "trials.csv", index=False)
        notes = [f"trials: {out / 'trials.csv'}"]
        count = {state: len(study.get_trials(deepcopy=False, states=(state,)))
                 for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
        if count[TrialState.COMPLETE]:
            notes += self._best_files(study, where, plan, out)
        else:
            notes.append("best.yaml: not written: no trial completed")
        notes += tune.draw_figures(study, out)
        best = (f"; best: trial {study.best_trial.number}, {study.best_value:.6g}"
                if count[TrialState.COMPLETE] else "")
        print(f"study {study.study_name!r}: {tune.finished(study)} of "
              f"{self.settings['n_trials']} trial(s) finished ({count[TrialState.COMPLETE]} "
              f"complete, {count[TrialState.PRUNED]} pruned), {count[TrialState.FAIL]} "
              f"failed{best}", flush=True)
        print(f"study outputs in {out}:\n" + "\n".join(f"  {n}" for n in notes), flush=True)

    def _best_files(self, study: Any, where: str, plan: Plan, out: Path) -> list[str]:
        """``best.yaml`` (an experiment file) and, when only ``algo.*`` keys were searched,
        ``best_algo.yaml`` (a conf/algo preset extending the jobs' preset)."""
        from plume.harness.integrations.tune import best_config, citation  # deferred: Hydra imports every plugin when any app starts

        assert self.parser is not None
        best = study.best_trial
        space = {k: p for k, p in plan.space.items() if k in best.params}

        def typed(override: str) -> Any:
            return self.parser.parse_override(override).value()

        (out / "best.yaml").write_text(best_config(
            best, space, typed, plan.groups, citation(study, where, best, "_global_")))
        where_to = "as conf/experiment/<name>.yaml: experiment=<name>"
        notes = [f"best.yaml: {out / 'best.yaml'} ({where_to})"]
        if all(k.startswith("algo.") for k in plan.space):
            (out / "best_algo.yaml").write_text(best_config(
                best, space, typed, set(), citation(study, where, best, None), prefix="algo.",
                defaults=[plan.preset, "_self_"]))
            notes.append(f"best_algo.yaml: {out / 'best_algo.yaml'} (as conf/algo/<name>.yaml: "
                         f"algo=<name>)")
        return notes


def _same(a: Any, b: Any) -> bool:
    """The same value of a search space (``1 == True`` and ``1 == 1.0`` are not)."""
    return type(a) is type(b) and a == b


def _one_sweeper(sweep_dir: Path, name: str) -> IO[str]:
    """The sweep folder's lock, held until the returned file is closed (the system drops it
    when the process dies); ConfigError when another sweeper holds it: its running trials
    would look abandoned to this one."""
    from plume.harness.config.errors import ConfigError  # deferred: Hydra imports every plugin when any app starts

    sweep_dir.mkdir(parents=True, exist_ok=True)
    handle = open(sweep_dir / LOCK, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigError(f"another sweeper is running the study {name!r} in {sweep_dir} "
                          f"(lock {sweep_dir / LOCK}): one sweeper process per study") from None
    return handle
