"""What one environment's emulation is: the link a trace becomes, the programs each session
runs in the two namespaces, the simulator's side of the same traces, and the env's episode
fields from per-step records (the simulator's ``eval.parquet`` schema, with a ``mode``).

An emulation class states ``inside``: the side that starts the exchange (ABR's player, CC's
sender). Mahimahi's shells (``emulation.link=mahimahi``) run that side inside them; Plume's
link does not need it. :func:`emulate` also returns each session's link counters (with the
link's lateness, judged against ``emulation.lateness_tolerance_ms``; None for Mahimahi's
shells, which report none).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from plume.emulation import abr, cc
from plume.emulation.emulator import Emulator
from plume.emulation.link import LinkSpec, Schedule

__all__ = ["EMULATIONS", "AbrEmulation", "CcEmulation", "Emulation", "emulate"]

PORT = 8000
UPLINK_MBPS = 12.0
"""ABR's client-to-server direction (requests only): Pensieve's 12 Mbit/s uplink trace."""
BITS_PER_PACKET = 1500 * 8


class Emulation(Protocol):
    inside: str
    traces: Any

    def link_specs(self, index: int) -> tuple[LinkSpec, LinkSpec]: ...
    def session(self, link, index: int) -> list[dict]: ...
    def simulate(self) -> list[list[dict]]: ...
    def eval_table(self, mode: str, records: list[list[dict]], test_set: str
                   ) -> pd.DataFrame: ...


def _rows(traces, fields: list[dict[str, float]], mode: str, test_set: str) -> pd.DataFrame:
    """The simulator's eval.parquet columns (one row per trace) plus ``mode``."""
    frame = pd.DataFrame(fields)
    frame.insert(0, "test_set", test_set)
    frame.insert(1, "trace", np.arange(len(traces)))
    frame.insert(2, "trace_id", [str(t) for t in traces.trace_ids])
    frame.insert(3, "label", None if traces.labels is None else list(traces.labels))
    frame.insert(4, "cluster", pd.NA)
    return frame.assign(progress=1.0, env_steps=0, mode=mode)


class AbrEmulation:
    """ABR sessions (Pensieve's setting): the trace's bandwidth downstream, HTTP chunks, the
    streaming player."""

    inside = "client"

    @staticmethod
    def check(params) -> None:
        from plume.harness.errors import ConfigError

        if params.variant != "pensieve":
            raise ConfigError("ABR emulation plays Pensieve's setting (its video, player "
                              "and QoE): set env.variant=pensieve")

    def __init__(self, settings, traces, export: Path, folder: Path) -> None:
        from plume.deploy.contract import read_contract
        from plume.envs.abr.video import VIDEO_SIZES

        self.settings, self.traces, self.export = settings, traces, export
        self.sizes_file = folder / "sizes.npy"
        np.save(self.sizes_file, VIDEO_SIZES.T)  # (chunk, level) bytes
        self.sizes_file.chmod(0o644)
        self.chunk_s = float(read_contract(export)["constants"]["chunk_seconds"])

    def link_specs(self, index: int) -> tuple[LinkSpec, LinkSpec]:
        traces, length = self.traces, int(self.traces.lengths[index])
        schedule = Schedule.from_bandwidth(traces.series["time"][index, :length],
                                           traces.series["bandwidth"][index, :length],
                                           float(traces.constants["period"][index]))
        delay = self.settings.delay_ms
        return (LinkSpec(schedule, delay, queue_packets=self.settings.queue_packets),
                LinkSpec(Schedule.constant(UPLINK_MBPS), delay))

    def session(self, link, index: int) -> list[dict]:
        budget = 60.0 + self.settings.chunks * 30.0  # a chunk takes seconds on slow traces
        link.popen("server", [sys.executable, "-m", "plume.emulation.abr", "serve", str(PORT),
                              str(self.sizes_file), str(budget)])
        time.sleep(0.5)
        return _json_of(link.run("client", [sys.executable, "-m", "plume.emulation.abr", "play",
                                            str(self.export), link.address("server"),
                                            str(PORT), str(self.settings.chunks)],
                                 timeout=budget, capture_output=True, text=True))

    def simulate(self) -> list[list[dict]]:
        return abr.simulate(str(self.export), self.traces, self.settings.chunks)

    def eval_table(self, mode: str, records: list[list[dict]], test_set: str) -> pd.DataFrame:
        """The env's episode fields and its score (QoE per chunk after the start-up chunk,
        as plume-eval and plume-train report it), plus mean level and throughput."""
        from plume.envs.registry import get_env

        fields = [abr.episode_fields(chunks, self.chunk_s) for chunks in records]
        columns = {k: np.array([f[k] for f in fields]) for k in fields[0]}
        score = get_env("abr").score.compute(columns)
        return _rows(self.traces, [{**f, "score": float(s)} for f, s in zip(fields, score)],
                     mode, test_set)


class CcEmulation:
    """CC flows: the link tuple (bandwidth, one-way delay, queue, loss), the data direction
    shaped; a paced UDP sender and an ACK-ing receiver."""

    inside = "server"

    @staticmethod
    def check(params) -> None:
        return None

    def __init__(self, settings, traces, export: Path, folder: Path) -> None:
        from plume.deploy.contract import read_contract

        self.settings, self.traces, self.export = settings, traces, export
        self.simulated, self.initial = cc.simulate(str(export), traces, settings.mis)
        self.reward_scale = float(read_contract(export)["env"]["params"].get("reward_scale",
                                                                            1.0))

    def link_specs(self, index: int) -> tuple[LinkSpec, LinkSpec]:
        constants = self.traces.constants
        mbps = float(constants["bandwidth"][index]) * BITS_PER_PACKET / 1e6
        delay_ms = float(constants["latency"][index]) * 1000.0
        down = LinkSpec(Schedule.constant(mbps), delay_ms,
                        queue_packets=max(int(constants["queue"][index]), 1),
                        loss=float(constants["loss"][index]), seed=index)
        return down, LinkSpec(Schedule.constant(100.0), delay_ms)

    def session(self, link, index: int) -> list[dict]:
        budget = 60.0 + self.settings.mis * 2.0
        link.popen("client", [sys.executable, "-m", "plume.emulation.cc", "receive", str(PORT),
                              str(budget)])
        time.sleep(0.3)
        return _json_of(link.run("server", [sys.executable, "-m", "plume.emulation.cc", "send",
                                            str(self.export), link.address("client"),
                                            str(PORT), str(self.settings.mis),
                                            str(self.initial[index])],
                                 timeout=budget, capture_output=True, text=True))

    def simulate(self) -> list[list[dict]]:
        return self.simulated

    def eval_table(self, mode: str, records: list[list[dict]], test_set: str) -> pd.DataFrame:
        capacity = self.traces.constants["bandwidth"]
        fields = [cc.episode_fields(mis, float(capacity[i]), self.reward_scale)
                  for i, mis in enumerate(records)]
        return _rows(self.traces, fields, mode, test_set)


EMULATIONS: dict[str, Any] = {"abr": AbrEmulation, "cc": CcEmulation}


def _json_of(done: subprocess.CompletedProcess) -> list[dict]:
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
