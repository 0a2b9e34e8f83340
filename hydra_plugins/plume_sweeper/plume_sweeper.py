"""``hydra/sweeper=plume``: Hydra's basic sweeper with Plume's refusals (``plume.harness.sweep``).

Every job of a batch is composed and checked (config, trace data, env package, algorithm fit)
before the batch is launched: a refused job is one line and never gets a folder; a job refused
or failed while running is one line; the sweep finishes the others, prints a summary and the
command exits non-zero. The jobs, batches and launchers are Hydra's own.
"""


from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import get_method
from omegaconf import OmegaConf


@dataclass
class PlumeSweeperConf:
    _target_: str = "hydra_plugins.plume_sweeper.plume_sweeper.PlumeSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    # The app's checks of one composed job config (raise ConfigError to refuse it).
    check: str = "plume.harness.preflight.check_train"
    app: str = "plume-train"


ConfigStore.instance().store(group="hydra/sweeper", name="plume", node=PlumeSweeperConf,
                             provider="plume")


class PlumeSweeper(BasicSweeper):
    def __init__(self, max_batch_size: Optional[int] = None,
                 params: Optional[Dict[str, str]] = None,
                 check: str = PlumeSweeperConf.check, app: str = PlumeSweeperConf.app) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.check, self.app = get_method(check), app

    def sweep(self, arguments: List[str]) -> Any:
        from plume.harness.sweep import SweepOutcome

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*self._parse_config(), *arguments])
        self.overrides = self.split_arguments(overrides, self.max_batch_size)
        swept = frozenset(o.get_key_element() for o in overrides if o.is_sweep_override())
        outcome, returns, index = SweepOutcome(self.app, swept), [], 0
        while not self.is_done():
            batch = self.get_job_batch()
            self.validate_batch_is_legal(batch)
            batch = outcome.check(batch, self._compose, self.check)
            if not batch:
                continue
            if index == 0:  # the sweep's folder, once a job of it will run
                sweep_dir = Path(self.config.hydra.sweep.dir)
                sweep_dir.mkdir(parents=True, exist_ok=True)
                OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
            results = self.launcher.launch(batch, initial_job_idx=index)
            outcome.collect(batch, results)
            index += len(batch)
            returns.append(results)
        outcome.finish()
        return returns

    def _compose(self, overrides: List[str]) -> Any:
        """A job's config without Hydra's node, as the job will see it."""
        cfg = self.hydra_context.config_loader.load_sweep_config(
            master_config=self.config, sweep_overrides=overrides)
        with_hydra = OmegaConf.to_container(cfg, resolve=False)
        with_hydra.pop("hydra", None)
        return OmegaConf.create(with_hydra)
