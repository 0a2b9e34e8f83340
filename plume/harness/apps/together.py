"""``train.seeds_in_process=K``: how one plume-train job runs its K seeds, each as the job it
would be alone, in threads of one process: their run directories, Hydra's record and job log
per seed; their learners meet in a :class:`~plume.harness.training.lockstep.SeedGroup`."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from plume.harness.config.schema import ConfigError
from plume.harness.training.lockstep import GroupSeat, SeedGroup
from plume.runs.store import RunLogHandler

log = logging.getLogger("plume")


def run_together(first: int, count: int, run_dir: Path,
                 run_seed: Callable[[int, Path, GroupSeat], Any]) -> Any:
    """Seeds ``first`` .. ``first+count-1``, each ``run_seed(seed, folder, seat)`` (the job
    it would be alone: its own lifecycle, lock and run directory ``<...>/seed=<s>`` beside
    ``run_dir``) in a thread of its own, their learners trained together in one SeedGroup.
    Returns the first seed's summary; the first error of a seed that failed is raised once
    every seed has ended."""
    group = SeedGroup(count)
    outcomes: list[Any] = [None] * count

    def seed_job(slot: int) -> None:
        seed = first + slot
        folder = run_dir.parent / f"seed={seed}"
        try:
            outcomes[slot] = run_seed(seed, folder, group.seat(slot, seed))
        except BaseException as err:  # noqa: BLE001 (reported below, once every seed ended)
            outcomes[slot] = err
        finally:
            group.leave(slot)

    threads = [threading.Thread(target=seed_job, args=(slot,), name=f"seed={first + slot}",
                                daemon=True) for slot in range(count)]
    log.info("training seeds %d-%d together in this process (train.seeds_in_process=%d)",
             first, first + count - 1, count)
    with seed_logs({t.name: run_dir.parent / t.name for t in threads}):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors:
        raise errors[0]
    return outcomes[0]


class OnlyThreads(logging.Filter):
    """Passes the records logged by the threads named."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName in self.names


@contextlib.contextmanager
def seed_logs(folders: dict[str, Path]):
    """Each seed's log lines in its own run directory (``folders``: thread name -> run
    directory, the first seed first): Hydra's job log (the first seed's) keeps its thread's
    lines and the main thread's, and every other seed's thread writes a log of the same name
    and format beside it. Lines a seed's training step prints while another seed's thread
    trains their turn land in that thread's log, headed by their own ``seed=<s>``. Without a
    job log (``run_job`` called directly) none is made."""
    root = logging.getLogger()
    job_logs = [h for h in root.handlers if isinstance(h, RunLogHandler)]
    if not job_logs:
        yield
        return
    (first, *others), job_log = list(folders), job_logs[0]
    only_first = OnlyThreads({first, threading.main_thread().name})
    job_log.addFilter(only_first)
    added = []
    for thread in others:
        handler = RunLogHandler(folders[thread] / Path(job_log.baseFilename).name, delay=True)
        handler.setFormatter(job_log.formatter)
        handler.setLevel(job_log.level)
        handler.addFilter(OnlyThreads({thread}))
        root.addHandler(handler)
        added.append(handler)
    try:
        yield
    finally:
        job_log.removeFilter(only_first)
        for handler in added:
            root.removeHandler(handler)
            handler.close()


def seed_record(hydra_record: dict[str, str], seed: int, folder: Path) -> dict[str, str]:
    """Hydra's record of the job (``.hydra/``) as it would read for seed ``seed`` alone in
    ``folder``: its config's seed, the ``seed=`` override, the output directory."""
    if not hydra_record:
        return {}
    overrides = [o for o in OmegaConf.to_container(OmegaConf.create(
        hydra_record["overrides.yaml"])) if not o.startswith("seed=")] + [f"seed={seed}"]
    hydra_cfg = OmegaConf.create(hydra_record["hydra.yaml"])
    hydra_cfg.hydra.overrides.task = overrides
    hydra_cfg.hydra.runtime.output_dir = str(folder)
    config = OmegaConf.create(hydra_record["config.yaml"])
    config.seed = seed
    return {"config.yaml": OmegaConf.to_yaml(config), "hydra.yaml": OmegaConf.to_yaml(hydra_cfg),
            "overrides.yaml": OmegaConf.to_yaml(OmegaConf.create(overrides))}


def check_seed_folder(run_dir: Path, job) -> None:
    """A group writes seed s into ``seed=<s>`` beside the job's folder: the folder must be
    named so (Hydra's layout), checked before anything is written."""
    count = job.train.seeds_in_process
    if run_dir.name != f"seed={job.seed}":
        raise ConfigError(f"train.seeds_in_process={count} writes seed s into the folder "
                          f"seed=<s> beside the job's; {run_dir} is not named seed={job.seed} "
                          "(hydra.run.dir changed?)")
