"""ABR's emulation slice (``SPEC.emulation``): Pensieve's setting over real TCP, the scenario
``plume-emulate`` plays (the programs it runs in the namespaces: ``plume.emulation.abr``), the
simulator's side of the same traces and the episode fields of both.

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
from plume.envs.abr import SPEC
from plume.envs.abr.video import VIDEO_SIZES

__all__ = ["UPLINK_MBPS", "AbrEmulation", "episode_fields", "simulate"]

UPLINK_MBPS = 12.0
"""ABR's client-to-server direction (requests only): Pensieve's 12 Mbit/s uplink trace."""


class AbrEmulation:
    """ABR sessions (Pensieve's setting): the trace's bandwidth downstream, HTTP chunks, the
    streaming player."""

    inside = "client"

    @staticmethod
    def check(params) -> None:
        if params.variant != "pensieve":
            raise ValueError("ABR emulation plays Pensieve's setting (its video, player "
                              "and QoE): set env.variant=pensieve")

    def __init__(self, settings, traces, export: Path, folder: Path) -> None:

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
        return json_of(link.run("client", [sys.executable, "-m", "plume.emulation.abr", "play",
                                           str(self.export), link.address("server"),
                                           str(PORT), str(self.settings.chunks)],
                                timeout=budget, capture_output=True, text=True))

    def simulate(self) -> list[list[dict]]:
        return simulate(str(self.export), self.traces, self.settings.chunks)

    def eval_table(self, mode: str, records: list[list[dict]], test_set: str) -> pd.DataFrame:
        """The env's episode fields and its score (QoE per chunk after the start-up chunk,
        as plume-eval and plume-train report it), plus mean level and throughput."""
        fields = [episode_fields(chunks, self.chunk_s) for chunks in records]
        columns = {k: np.array([f[k] for f in fields]) for k in fields[0]}
        score = SPEC.score.compute(columns)
        return eval_rows(self.traces, [{**f, "score": float(s)} for f, s in zip(fields, score)],
                     mode, test_set)


def episode_fields(records: list[dict[str, float]], chunk_s: float) -> dict[str, float]:
    """The env's episode fields (``SPEC.episode_fields``) from per-chunk records, plus mean
    level and throughput."""
    reward = np.array([r["reward"] for r in records])
    return {"return": float(reward.sum()), "return_transformed": float(reward.sum()),
            "first_return": float(reward[0]),
            "quality": float(sum(r["quality"] for r in records)),
            "stall": float(sum(r["stall"] for r in records)),
            "change": float(sum(r["change"] for r in records)),
            "video_seconds": len(records) * chunk_s, "length": len(records),
            "throughput_mbps": float(8e-6 * sum(r["size"] for r in records)
                                     / sum(r["delay"] for r in records)),
            "mean_level": float(np.mean([r["level"] for r in records]))}


def simulate(export: str, traces, chunks: int) -> list[list[dict[str, float]]]:
    """Per trace, the first ``chunks`` chunks of the controller's test episode in the
    simulator, as per-chunk records (the same fields as ``plume.emulation.abr.play``'s)."""
    env, policy = simulator(load_controller(export), traces)
    records: list[list[dict[str, float]]] = [[] for _ in range(len(traces))]
    obs, _ = env.reset()
    for _ in range(chunks):
        actions = np.asarray(policy(obs))
        obs, *_ = env.step(actions)
        step = env.last_step()
        for i in range(len(traces)):
            records[i].append({"level": int(actions[i]), "size": float(step["size"][i]),
                               "delay": float(step["delay"][i]), "stall": float(step["stall"][i]),
                               "buffer": float(step["buffer"][i]),
                               "reward": float(step["reward"][i]),
                               "quality": float(step["quality"][i]),
                               "change": float(step["change"][i])})
    return records
