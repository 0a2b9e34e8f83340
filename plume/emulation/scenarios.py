"""What one environment's emulation is: the link a trace becomes, the programs each session
runs in the two namespaces, the simulator's side of the same traces, and the env's episode
fields from per-step records (the simulator's ``eval.parquet`` schema, with a ``mode``).

The scenario classes belong to their environments (``EnvSpec.emulation``: the env's own
``emulate.py``, e.g. ``plume.envs.abr.emulate``); this module holds their protocol
(:class:`Emulation`), what they build on (:func:`eval_rows`, :func:`json_of`, :data:`PORT`)
and the player of every scenario (:func:`emulate`). :func:`scenario_class` finds an
environment's scenario through its spec.

An emulation class states ``inside``: the side that starts the exchange (ABR's player, CC's
sender). Mahimahi's shells (``emulation.link=mahimahi``) run that side inside them; Plume's
link does not need it. :func:`emulate` also returns each session's link counters (with the
link's lateness, judged against ``emulation.lateness_tolerance_ms``; None for Mahimahi's
shells, which report none).
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np
import pandas as pd

from plume.emulation.emulator import Emulator
from plume.emulation.link import LinkSpec
from plume.envs.registry import ENV_PACKAGES, get_env

__all__ = ["PORT", "Emulation", "emulate", "eval_rows", "json_of", "scenario_class"]

PORT = 8000
"""The port the server-side program of a session listens on."""


class Emulation(Protocol):
    """A scenario, built as ``cls(settings, traces, export, folder)`` after
    ``cls.check(params)`` accepted the env's parameters (ConfigError otherwise)."""

    inside: str
    traces: Any

    @staticmethod
    def check(params) -> None: ...

    def link_specs(self, index: int) -> tuple[LinkSpec, LinkSpec]: ...
    def session(self, link, index: int) -> list[dict]: ...
    def simulate(self) -> list[list[dict]]: ...
    def eval_table(self, mode: str, records: list[list[dict]], test_set: str
                   ) -> pd.DataFrame: ...


def eval_rows(traces, fields: list[dict[str, float]], mode: str, test_set: str) -> pd.DataFrame:
    """The simulator's eval.parquet columns (one row per trace) plus ``mode``."""
    frame = pd.DataFrame(fields)
    frame.insert(0, "test_set", test_set)
    frame.insert(1, "trace", np.arange(len(traces)))
    frame.insert(2, "trace_id", [str(t) for t in traces.trace_ids])
    frame.insert(3, "label", None if traces.labels is None else list(traces.labels))
    frame.insert(4, "cluster", pd.NA)
    return frame.assign(progress=1.0, env_steps=0, mode=mode)


def scenario_class(spec) -> type:
    """The scenario class ``spec``'s environment declares (``EnvSpec.emulation``); ConfigError
    naming the built-in environments that have one when it declares none (a ValueError: the
    app reports it as the config's mistake)."""
    if spec.emulation is None:
        emulated = [name for name in ENV_PACKAGES if get_env(name).emulation is not None]
        raise ValueError(f"env={spec.name} has no emulation; emulated envs: "
                          f"{', '.join(emulated)}")
    return spec.emulation.scenario()


def json_of(done: subprocess.CompletedProcess) -> list[dict]:
    """The JSON records a session's program printed; RuntimeError with its last error line."""
    if done.returncode != 0:
        raise RuntimeError(f"the emulated session failed: "
                           f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(done.stdout)


def _link(emulation: Emulation, settings, index: int):
    down, up = emulation.link_specs(index)
    if settings.link == "mahimahi":
        from plume.emulation.mahimahi import MahimahiShell

        return MahimahiShell(down, up, inside=emulation.inside)
    return Emulator(down, up, lateness_tolerance_ms=settings.lateness_tolerance_ms)


def emulate(emulation: Emulation, settings
            ) -> tuple[list[list[dict]], list[list[dict]], list[dict | None]]:
    """Every trace emulated (``settings.parallel`` sessions at once, each on its own link)
    and simulated: per-step records of both modes, by trace, and each session's link
    counters (``Emulator.stats``: None where the link reports none)."""
    def one(index: int) -> tuple[list[dict], dict | None]:
        with _link(emulation, settings, index) as link:
            records = emulation.session(link, index)
        return records, getattr(link, "stats", None)  # set when the link has stopped

    with ThreadPoolExecutor(max_workers=settings.parallel) as sessions:
        done = list(sessions.map(one, range(len(emulation.traces))))
    return [records for records, _ in done], emulation.simulate(), [s for _, s in done]
