"""The job lists of the paper figures: which ``plume-train`` / ``plume-eval`` runs each figure
needs in each profile (``experiments.catalog`` says what the figures hold). Planning,
launching and drawing them is ``experiments.runner``; the ``--seeds auto`` rounds,
``experiments.rounds``, pick from these lists too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from experiments.catalog import (
    FIG10_DATASETS,
    FIGURES,
    PROFILES,
    SAMPLER_LABELS,
    SEEDS,
    TRAINING_FIGURES,
    Figure,
)

NAMES = (*FIGURES, "all")


@dataclass(frozen=True)
class Job:
    """One run: ``plume-train experiment=<experiment> <overrides> seed=<seed>``, or with
    ``config="eval"`` one ``plume-eval <overrides>`` (a classic controller). ``group`` and
    ``label`` say what it draws in its figure; they are not part of the job's identity, so
    figures that share a run share the job."""

    experiment: str
    overrides: tuple[str, ...]
    seed: int
    config: str = "train"
    group: str = field(default="", compare=False)
    label: str = field(default="", compare=False)

    def args(self, root: str | Path, extra: Sequence[str] = ()) -> list[str]:
        head = [f"experiment={self.experiment}"] if self.experiment else []
        extra = extra if self.config == "train" else [e for e in extra if _eval_key(e)]
        return [*head, *self.overrides, *extra, f"seed={self.seed}", f"paths.root={root}"]

    def axis(self, key: str) -> str | None:
        for override in self.overrides:
            name, _, value = override.partition("=")
            if name == key:
                return value
        return None


def _eval_key(override: str) -> bool:
    """Whether a job override also applies to ``plume-eval``: env keys but the number of
    training copies (a test env has one copy per trace), paths, overwrite."""
    key = override.partition("=")[0].lstrip("+~")
    return key.split(".")[0] in ("env", "paths", "overwrite") and key != "env.n_envs"


def experiment(base: str, profile: str) -> str:
    """Name of the experiment config of ``base`` in ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    return base if profile == "paper" else f"{base}_quick"


def figure_jobs(name: str, profile: str = "quick", n_seeds: int | None = None,
                groups: Sequence[str] | None = None) -> list[Job]:
    """The jobs figure ``name`` needs in ``profile`` (n_seeds replaces the profile's and the
    groups' seed counts; ``groups``: only those groups of a training figure): its curves'
    plume-train runs, then its controllers' plume-eval runs."""
    if groups is not None and (why := groups_problem(name, groups)):
        raise ValueError(why)
    if name not in NAMES:
        raise ValueError(f"unknown figure {name!r}; valid: {', '.join(NAMES)}")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    if name == "all":
        unique: dict[Job, None] = {}
        for figure in FIGURES:
            unique.update(dict.fromkeys(figure_jobs(figure, profile, n_seeds)))
        return list(unique)
    if name == "fig10":  # fig9's PPO Plume-Dynamic runs on two datasets
        return [Job(experiment("fig9", profile), (f"env.dataset={d}", "sampler=plume_dynamic"),
                    seed, group=d, label=SAMPLER_LABELS["plume_dynamic"])
                for d in FIG10_DATASETS for seed in range(n_seeds or SEEDS[profile])]
    if name in TRAINING_FIGURES:
        return _training_jobs(TRAINING_FIGURES[name].only(groups), profile, n_seeds)
    return []  # fig7, fig11, fig12, fig13 draw datasets only


def _training_jobs(figure: Figure, profile: str, n_seeds: int | None) -> list[Job]:
    jobs = [Job(experiment(curve.base, profile), curve.overrides, seed, group=group.key,
                label=curve.label)
            for group in figure.groups for curve in group.curves
            for seed in range(n_seeds or max(SEEDS[profile], group.seeds))]
    jobs += [Job("", (f"env={group.env}", *group.env_overrides, f"controller={name}"), 0,
                 config="eval", group=group.key, label=name)
             for group in figure.groups for name in group.controllers]
    return jobs


def groups_problem(name: str, groups: Sequence[str]) -> str | None:
    """Why figure ``name`` has no such ``groups`` to choose (None: it has)."""
    if name not in TRAINING_FIGURES:
        return (f"groups are chosen from a training figure ({', '.join(TRAINING_FIGURES)}); "
                f"{name} has none")
    try:
        TRAINING_FIGURES[name].only(groups)
    except ValueError as err:
        return str(err)
    return None
