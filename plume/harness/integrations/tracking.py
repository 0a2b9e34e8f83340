"""Experiment trackers. W&B is a viewer, never the source of truth, and it never blocks:
offline unless the user asks for online, a missing API key fails at once with a message
instead of prompting, and outside online mode nothing reaches the network (W&B's own
analytics are switched off; tests/test_no_network.py proves it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class NullTracker:
    """``logger=none``: the run directory alone records the job."""

    location: str | None = None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        pass

    def summarise(self, values: dict[str, Any]) -> None:
        pass

    def log_artifact(self, folder: Path, name: str, kind: str) -> None:
        pass

    def finish(self, exit_code: int = 0) -> None:
        pass


class WandbTracker:
    """One W&B run per job, grouped by experiment, job type = sampler, tags = composed choices."""

    def __init__(
        self,
        *,
        run_dir: Path,
        mode: str,
        project: str,
        entity: str | None,
        group: str,
        job_type: str,
        name: str,
        tags: list[str],
        config: dict[str, Any],
        beside_others: bool = False,
    ) -> None:
        """``beside_others``: other W&B runs of this process stay open meanwhile (seeds
        trained together, one run each); otherwise a run left open is finished first."""
        os.environ.setdefault("WANDB_SILENT", "true")
        if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _has_netrc_key()):
            raise RuntimeError(
                "logger.mode=online needs W&B credentials (`wandb login` or WANDB_API_KEY); "
                "use logger.mode=offline and `wandb sync` later"
            )
        import wandb

        if mode != "online":
            _no_wandb_analytics()
        self._wandb = wandb
        self.run = wandb.init(
            project=project,
            entity=entity,
            group=group,
            job_type=job_type,
            name=name,
            tags=tags[:64],
            config=config,
            dir=str(run_dir),
            mode=mode,
            reinit="create_new" if beside_others else "finish_previous",
            settings=wandb.Settings(console="off", init_timeout=60),
        )
        self.location = str(Path(self.run.dir).parent) if mode != "disabled" else None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log(metrics, step=step)

    def summarise(self, values: dict[str, Any]) -> None:
        self.run.summary.update(values)

    def log_artifact(self, folder: Path, name: str, kind: str) -> None:
        """Every file of ``folder`` as one artifact (an exported controller)."""
        artifact = self._wandb.Artifact(name, type=kind)
        artifact.add_dir(str(folder))
        self.run.log_artifact(artifact)

    def finish(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)


def _has_netrc_key() -> bool:
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")


def _no_wandb_analytics() -> None:
    """Stop W&B's own usage analytics, which otherwise probe its server from a background
    thread even in offline mode (wandb 0.31: an HTTPS POST to api.forge.coreweave.com, seen
    as a DNS lookup). Process-wide; only W&B's telemetry about itself is affected."""
    try:
        from wandb.analytics.opentelemetry import opentelemetry_proxy
    except ImportError:  # a wandb without that module has nothing to stop
        return
    disable = getattr(opentelemetry_proxy, "disable", None)
    if disable is not None:
        disable()
