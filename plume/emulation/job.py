"""``plume-emulate``: a controller's test traces over real TCP, beside the simulator's.

    plume-emulate abr runs/.../export --traces 20 --parallel 4 --out runs/emulation/pensieve_a2c
    plume-emulate abr --controller bba --variant pensieve --traces 20 --out runs/emulation/bba

Each test trace is one session in real time on its own emulated link (namespaces and link
per session, ``--parallel`` at once): the trace's bandwidth drives the server-to-client
direction, ``--delay-ms`` each way (Pensieve's emulation: 40, an 80 ms RTT), a droptail queue
of ``--queue-packets``. The same controller plays the same traces in the simulator. The output
folder holds ``emulation.json`` (what was emulated, how), ``emulation.parquet`` (one row per mode and trace: the env's episode fields, QoE
per chunk, mean level, throughput), ``steps.parquet`` (every chunk or MI of both modes) and
``gap.md`` / ``gap.csv``: emulation minus simulation per metric, mean over traces with a 95 %
Student-t interval (none from fewer than 5 traces), and per trace.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from plume.emulation import abr, cc
from plume.emulation.emulator import Emulator
from plume.emulation.gap import gap_rows, per_trace_gaps
from plume.emulation.link import LinkSpec, Schedule

log = logging.getLogger("plume")

PORT = 8000
UPLINK_MBPS = 12.0
"""ABR's client-to-server direction (requests only): Pensieve's 12 Mbit/s uplink trace."""
BITS_PER_PACKET = 1500 * 8


class AbrEmulation:
    """ABR sessions: the trace's bandwidth downstream, HTTP chunks, the streaming player."""

    metrics = ("qoe_per_chunk", "mean_level", "stall", "throughput_mbps")

    def __init__(self, args, traces, export: Path, folder: Path) -> None:
        from plume.envs.abr.video import VIDEO_SIZES

        self.args, self.traces, self.export = args, traces, export
        self.sizes_file = folder / "sizes.npy"
        np.save(self.sizes_file, VIDEO_SIZES.T)  # (chunk, level) bytes
        contract = json.loads((export / "contract.json").read_text())
        self.chunk_s = float(contract["constants"]["chunk_seconds"])

    def link(self, index: int) -> Emulator:
        traces, length = self.traces, int(self.traces.lengths[index])
        schedule = Schedule.from_bandwidth(traces.series["time"][index, :length],
                                           traces.series["bandwidth"][index, :length],
                                           float(traces.constants["period"][index]))
        return Emulator(LinkSpec(schedule, self.args.delay_ms,
                                 queue_packets=self.args.queue_packets),
                        LinkSpec(Schedule.constant(UPLINK_MBPS), self.args.delay_ms))

    def session(self, emu: Emulator, index: int) -> list[dict]:
        budget = 60.0 + self.args.chunks * 30.0  # a chunk takes seconds on the slowest trace
        emu.popen("server", [sys.executable, "-m", "plume.emulation.abr", "serve", str(PORT),
                             str(self.sizes_file), str(budget)])
        time.sleep(0.5)
        return _json_of(emu.run("client", [sys.executable, "-m", "plume.emulation.abr", "play",
                                           str(self.export), emu.address("server"), str(PORT),
                                           str(self.args.chunks)],
                                timeout=budget, capture_output=True, text=True))

    def simulate(self) -> list[list[dict]]:
        return abr.simulate(str(self.export), self.traces, self.args.chunks)

    def fields(self, records: list[dict]) -> dict[str, float]:
        """The episode fields and the env's own score (QoE per chunk after the start-up
        chunk, as plume-eval and plume-train report it)."""
        from plume.envs.registry import get_env

        fields = abr.episode_fields(records, self.chunk_s)
        score = get_env("abr").score.compute({k: np.array([fields[k]]) for k in fields})
        return {**fields, "qoe_per_chunk": float(score[0])}


class CcEmulation:
    """CC flows: the link tuple (bandwidth, one-way delay, queue, loss) in both directions'
    delay, the data direction shaped; a paced UDP sender and an ACK-ing receiver."""

    metrics = ("score", "throughput_mbps", "latency", "loss")

    def __init__(self, args, traces, export: Path, folder: Path) -> None:
        self.args, self.traces, self.export = args, traces, export
        self.simulated, self.initial = cc.simulate(str(export), traces, args.mis)

    def link(self, index: int) -> Emulator:
        constants = self.traces.constants
        mbps = float(constants["bandwidth"][index]) * BITS_PER_PACKET / 1e6
        delay_ms = float(constants["latency"][index]) * 1000.0
        down = LinkSpec(Schedule.constant(mbps), delay_ms,
                        queue_packets=max(int(constants["queue"][index]), 1),
                        loss=float(constants["loss"][index]), seed=index)
        return Emulator(down, LinkSpec(Schedule.constant(100.0), delay_ms))

    def session(self, emu: Emulator, index: int) -> list[dict]:
        budget = 60.0 + self.args.mis * 2.0
        emu.popen("client", [sys.executable, "-m", "plume.emulation.cc", "receive", str(PORT),
                             str(budget)])
        time.sleep(0.3)
        return _json_of(emu.run("server", [sys.executable, "-m", "plume.emulation.cc", "send",
                                           str(self.export), emu.address("client"), str(PORT),
                                           str(self.args.mis), str(self.initial[index])],
                                timeout=budget, capture_output=True, text=True))

    def simulate(self) -> list[list[dict]]:
        return self.simulated

    def fields(self, records: list[dict]) -> dict[str, float]:
        return cc.episode_fields(records)


EMULATIONS = {"abr": AbrEmulation, "cc": CcEmulation}


def _json_of(done: subprocess.CompletedProcess) -> list[dict]:
    if done.returncode != 0:
        raise RuntimeError(f"the emulated session failed: "
                           f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(done.stdout)


def _rows(mode: str, traces, records: list[list[dict]], emulation) -> list[dict]:
    return [{"mode": mode, "trace": i, "trace_id": str(traces.trace_ids[i]),
             **emulation.fields(chunks)} for i, chunks in enumerate(records)]


def run(args, export: Path, traces) -> pd.DataFrame:
    """Emulate and simulate every trace of ``traces``; write the output folder."""
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    contract = json.loads((export / "contract.json").read_text())
    with tempfile.TemporaryDirectory(prefix="plume-emulation-") as tmp:
        emulation = EMULATIONS[args.env](args, traces, export, Path(tmp))

        def one(index: int) -> list[dict]:
            with emulation.link(index) as emu:
                return emulation.session(emu, index)

        with ThreadPoolExecutor(max_workers=args.parallel) as sessions:
            emulated = list(sessions.map(one, range(len(traces))))
        simulated = emulation.simulate()
    frame = pd.DataFrame(_rows("emulation", traces, emulated, emulation)
                         + _rows("simulation", traces, simulated, emulation))
    frame.to_parquet(out / "emulation.parquet")
    pd.DataFrame([{"mode": mode, "trace": i, "step": k, **record}
                  for mode, records in (("emulation", emulated), ("simulation", simulated))
                  for i, steps in enumerate(records)
                  for k, record in enumerate(steps)]).to_parquet(out / "steps.parquet")
    summary = pd.DataFrame(gap_rows(frame, emulation.metrics))
    per_trace = per_trace_gaps(frame, emulation.metrics)
    summary.to_csv(out / "gap.csv", index=False)
    per_trace.to_csv(out / "gap_per_trace.csv", index=False)
    (out / "gap.md").write_text(_gap_markdown(contract, summary, per_trace, args))
    policy = contract["policy"].get("controller") or contract["policy"].get("algorithm")
    (out / "emulation.json").write_text(json.dumps({
        "env": args.env, "variant": contract["env"].get("variant"), "policy": policy,
        "export": str(export.resolve()), "traces": len(traces),
        "trace_ids": [str(t) for t in traces.trace_ids], "metrics": list(emulation.metrics),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }, indent=2))
    return summary


def _gap_markdown(contract: dict, summary: pd.DataFrame, per_trace: pd.DataFrame,
                  args) -> str:
    policy = contract["policy"].get("controller") or contract["policy"].get("algorithm")
    lines = [f"# Sim-to-emulation gap: {policy} ({contract['env']['name']}, "
             f"{contract['env'].get('variant')})", "",
             f"Emulation minus simulation, mean over {int(summary['traces'][0])} traces with a "
             "95 % Student-t interval over traces (none from fewer than 5).", "",
             "| metric | simulation | emulation | gap [95% t] |",
             "|---|---:|---:|---:|"]
    for row in summary.itertuples():
        interval = "" if np.isnan(row.gap_lo) else f" [{row.gap_lo:+.3f}, {row.gap_hi:+.3f}]"
        lines.append(f"| {row.metric} | {row.simulation:.3f} | {row.emulation:.3f} | "
                     f"{row.gap:+.3f}{interval} |")
    lines += ["", "Per trace (emulation minus simulation):", "",
              "| trace | " + " | ".join(per_trace.columns[1:]) + " |",
              "|---|" + "---:|" * (len(per_trace.columns) - 1)]
    for row in per_trace.itertuples(index=False):
        lines.append(f"| {row[0]} | " + " | ".join(f"{v:+.3f}" for v in row[1:]) + " |")
    return "\n".join(lines) + "\n"


DEFAULT_DATASETS = {"abr": "pensieve_synthetic", "cc": "aurora"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="plume-emulate", description=__doc__.split("\n\n")[0])
    parser.add_argument("env", choices=tuple(EMULATIONS))
    parser.add_argument("export", nargs="?", help="an export folder (plume-export)")
    parser.add_argument("--controller", help="a classic controller instead of an export")
    parser.add_argument("--variant", default="pensieve", choices=("pensieve",),
                        help="abr: the setting (Pensieve's)")
    parser.add_argument("--dataset", help="built-in dataset whose test split is played "
                        "(abr: pensieve_synthetic, cc: aurora)")
    parser.add_argument("--traces", type=int, default=20, help="the first N test traces")
    parser.add_argument("--parallel", type=int, default=2, help="sessions at once")
    parser.add_argument("--chunks", type=int, default=48, help="abr: chunks per session")
    parser.add_argument("--mis", type=int, default=400, help="cc: monitor intervals per flow")
    parser.add_argument("--delay-ms", type=float, default=40.0,
                        help="abr: one-way delay (cc takes each link's own)")
    parser.add_argument("--queue-packets", type=int, default=None,
                        help="abr: droptail bound (cc takes each link's own)")
    parser.add_argument("--out", required=True, type=Path)
    return parser


def main(argv: list[str] | None = None) -> None:
    """``plume-emulate abr|cc EXPORT|--controller NAME ...``; see the module docstring."""
    from plume.deploy.export import export_controller
    from plume.emulation.netns import EmulationUnavailable
    from plume.envs.registry import get_env

    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[plume-emulate] %(message)s")
    if (args.export is None) == (args.controller is None):
        parser.error("give an export folder or --controller, not both")
    params = {"variant": args.variant} if args.env == "abr" else {}
    export = Path(args.export) if args.export else export_controller(
        args.env, params, args.controller, args.out / "export")
    spec = get_env(args.env)
    traces = spec.load_builtin(args.dataset or DEFAULT_DATASETS[args.env], "test")
    traces = traces.subset(list(range(min(args.traces, len(traces)))))
    started = time.time()
    try:
        summary = run(args, export, traces)
    except EmulationUnavailable as err:
        print(f"plume-emulate: {err}", file=sys.stderr)
        sys.exit(2)
    log.info("%d traces in %.0f s; gap (emulation - simulation):\n%s", len(traces),
             time.time() - started, summary.to_string(index=False))


if __name__ == "__main__":
    main()
