"""CC's emulation slice (``SPEC.emulation``): Aurora flows over real UDP, the scenario
``plume-emulate`` plays (the programs it runs in the namespaces: ``plume.emulation.cc``), the
simulator's side of the same links and the episode fields of both.

Imported only by the emulation layer, through the spec's lazy loader: it builds on
``plume.emulation``, which an env package must not import when it is imported.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from plume.deploy import load_controller
from plume.deploy.contract import read_contract
from plume.deploy.replay import simulator
from plume.emulation.link import LinkSpec, Schedule
from plume.emulation.scenarios import PORT, eval_rows, json_of
from plume.envs.cc import PACKET_BYTES
from plume.envs.cc.deploy import simulated_mi

__all__ = ["BITS_PER_PACKET", "CcEmulation", "episode_fields", "simulate"]

BITS_PER_PACKET = PACKET_BYTES * 8


class CcEmulation:
    """CC flows: the link tuple (bandwidth, one-way delay, queue, loss), the data direction
    shaped; a paced UDP sender and an ACK-ing receiver."""

    inside = "server"

    @staticmethod
    def check(params) -> None:
        return None

    def __init__(self, settings, traces, export: Path, folder: Path) -> None:

        self.settings, self.traces, self.export = settings, traces, export
        self.simulated, self.initial = simulate(str(export), traces, settings.mis)
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
        return json_of(link.run("server", [sys.executable, "-m", "plume.emulation.cc", "send",
                                           str(self.export), link.address("client"),
                                           str(PORT), str(self.settings.mis),
                                           str(self.initial[index])],
                                timeout=budget, capture_output=True, text=True))

    def simulate(self) -> list[list[dict]]:
        return self.simulated

    def eval_table(self, mode: str, records: list[list[dict]], test_set: str) -> pd.DataFrame:
        capacity = self.traces.constants["bandwidth"]
        fields = [episode_fields(mis, float(capacity[i]), self.reward_scale)
                  for i, mis in enumerate(records)]
        return eval_rows(self.traces, fields, mode, test_set)


def simulate(export: str, traces, mis: int) -> tuple[list[list[dict]], list[float]]:
    """The same controller on the same links in the fluid simulator: per trace, the first
    ``mis`` MIs as records like ``plume.emulation.cc.send``'s, and each episode's initial
    rate (bit/s)."""
    env, policy = simulator(load_controller(export), traces)
    obs, _ = env.reset()
    initial = [float(r) * BITS_PER_PACKET for r in env.rate]
    records: list[list[dict]] = [[] for _ in range(len(traces))]
    for _ in range(mis):
        obs, *_ = env.step(np.asarray(policy(obs)))
        step = env.last_step()
        for i in range(len(traces)):
            stats = simulated_mi(step, i, BITS_PER_PACKET)
            records[i].append({**stats, "rate_bps": stats["sending_rate_bps"],
                               "reward": float(step["reward"][i])})
    return records, initial


def episode_fields(records: list[dict], capacity_pps: float,
                   reward_scale: float = 1.0) -> dict[str, float]:
    """The env's episode fields (``SPEC.episode_fields``) from per-MI records: sums and
    means over the MIs, utilisation = packets delivered / the link's ``capacity_pps`` over
    the flow's duration; ``score`` the mean reward per MI, plus throughput in Mbit/s."""
    def mean(key: str) -> float:
        return float(np.mean([r[key] for r in records]))

    delivered = sum(r["receiving_rate_bps"] * r["duration_s"] for r in records) / BITS_PER_PACKET
    duration = sum(r["duration_s"] for r in records)
    total = float(sum(r["reward"] for r in records))
    return {"return": total, "return_transformed": total * reward_scale,
            "length": len(records), "throughput": mean("receiving_rate_bps") / BITS_PER_PACKET,
            "latency": mean("latency_s"), "loss": mean("loss"),
            "utilisation": float(delivered / (capacity_pps * duration)),
            "score": mean("reward"), "throughput_mbps": mean("receiving_rate_bps") / 1e6}
