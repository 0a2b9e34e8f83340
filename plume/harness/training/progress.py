"""What a running job shows: a live bar with rate and ETA on a terminal, periodic lines when
the output is a file or a pipe (a SLURM log, a CI job), and a line at every evaluation either
way. The rate counts the steps this process trained (a resumed job's earlier steps are not
its own), and the ETA is never negative."""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

import numpy as np

log = logging.getLogger("plume")

BAR_REFRESH_S = 0.25


def format_clock(seconds: float) -> str:
    """``h:mm:ss``; ``?`` when unknown (no rate yet); never negative."""
    if not np.isfinite(seconds):
        return "?"
    minutes, secs = divmod(max(round(seconds), 0), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


class Progress:
    """Progress of one job of ``total`` env steps, starting at ``start_steps``."""

    def __init__(self, total: int, start_steps: int, every_s: float, score_unit: str,
                 stream: TextIO | None = None, label: str = "") -> None:
        """``label``: which of several jobs of one process this is (``seed=5``): it heads
        every line, and no bar is drawn (K bars cannot share a terminal)."""
        self.total, self.start_steps, self.every_s = total, start_steps, every_s
        self.score_unit, self.label = score_unit, label
        self.started = self.last_line = self.last_bar = time.time()
        self.scores: dict[str, float] = {}  # test set -> latest test score
        self.train_return: float | None = None
        stream = sys.stderr if stream is None else stream
        self.bar = None
        if stream.isatty() and not label:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start_steps, unit="step", unit_scale=True,
                            dynamic_ncols=True, file=stream, smoothing=0.05, leave=True)

    def restart_clock(self, start_steps: int) -> None:
        """The job resumed at ``start_steps``: its rate counts from here."""
        self.start_steps = start_steps
        self.started = time.time()
        if self.bar is not None:
            self.bar.reset(total=self.total)
            self.bar.update(start_steps)

    def rate(self, env_steps: int) -> float:
        elapsed = time.time() - self.started
        return (env_steps - self.start_steps) / elapsed if elapsed > 0 else 0.0

    def training(self, env_steps: int, train_return: float | None) -> bool:
        """After a training step; True when a line or the bar was drawn (the job is alive)."""
        if train_return is not None:
            self.train_return = train_return
        now = time.time()
        if self.bar is not None:
            if now - self.last_bar < BAR_REFRESH_S:
                return False
            self.last_bar = now
            self.bar.update(env_steps - self.bar.n)
            self.bar.set_postfix_str(self._summary(), refresh=True)
            return True
        if now - self.last_line < self.every_s:
            return False
        self.line("train", env_steps)
        return True

    def evaluated(self, env_steps: int, scores: dict[str, float]) -> None:
        """After an evaluation: always a line (above the bar on a terminal)."""
        self.scores.update(scores)
        self.line("eval", env_steps)

    def line(self, prefix: str, env_steps: int) -> None:
        self.last_line = time.time()
        rate = self.rate(env_steps)
        eta = max(self.total - env_steps, 0) / rate if rate > 0 else float("nan")
        head = f"{self.label} " if self.label else ""
        text = (f"{head}[{prefix}] {100 * min(env_steps / self.total, 1.0):5.1f}% {env_steps:,}/"
                f"{self.total:,} steps | {rate:,.0f} steps/s | eta {format_clock(eta)} | "
                f"{self._summary()}")
        if self.bar is not None:
            self.bar.clear()
            log.info(text)
            self.bar.update(env_steps - self.bar.n)
            self.bar.refresh()
        else:
            log.info(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _summary(self) -> str:
        train = "n/a" if self.train_return is None else f"{self.train_return:.2f}"
        tests = " ".join(f"{k}={v:.3f}" for k, v in self.scores.items()) or "n/a"
        return f"train return {train} | test {self.score_unit} {tests}"
