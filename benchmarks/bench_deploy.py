"""Benchmark: decision latency of the deployment runtime (``plume.deploy.runtime``) and of the
protocol adapters (``plume.deploy.adapters``), one decision at a time, on one core.

Run from the repository root::

    python benchmarks/bench_deploy.py [--decisions 5000] [--warmup 200] [--quick]

Single core on purpose: the thread-count variables are set before numpy and onnxruntime are
imported, onnxruntime runs one thread (the runtime's default), and where the OS allows the
whole process (servers and clients included) is pinned to one CPU (``--cpu``). Every timed
call is one ``time.perf_counter_ns`` interval; ``--warmup`` decisions run untimed first, then
up to ``--decisions`` are timed (at most ``--max-seconds`` per row, and half as much for the
warm-up). Tables give the median, the 99th percentile and the count, in microseconds, and a
ratio against a baseline measured in the same process.

Policies: networks of the paper's architectures, untrained (latency does not depend on the
weights): Gelato (``network="gelato"``, heads [256], ReLU; observation 260, 10 formats),
Pensieve (``network="pensieve"``, heads [128], ReLU; observation 48, 6 levels), Aurora (MLP
[64, 64], tanh; CC) and Park's load balancer (MLP [256, 128], GELU), exported with
``export_policy`` (ONNX + parity check) into a temporary folder; classic rules exported with
``export_controller``. Decision inputs: the measurement sequences of
``plume.deploy.replay.simulated_sessions`` on the first ``--sessions`` test traces (each
export played by its own policy), cycled through, so every timed decision is a realistic one;
a session's ``reset`` is untimed.

1. Learned policies through the runtime: baseline ``policy.outputs(obs)`` (the ONNX model on
   observations the runtime built), then ``policy.act`` (model + greedy rule) and
   ``decide(measurement)`` (observation building + model + rule + the action's units).
2. Classic rules through the runtime: ``decide`` latency, against the learned ``decide`` of
   the same environment.
3. Adapters beside the runtime's ``decide`` on the same decisions (the inputs the adapter
   hands the runtime), overhead = adapter median - runtime median:

   * Pensieve: ``PensieveDecisions.answer`` (JSON parse and checks, no HTTP), then the HTTP
     round trip over 127.0.0.1 on one keep-alive ``http.client.HTTPConnection``; the server
     (``make_server``) runs in a thread of this process, on the same core. Bodies are encoded
     before timing (the player's own JSON encoding is not counted);
   * Puffer ``python_ipc``: this benchmark plays Puffer (listens on a Unix socket in a
     temporary folder, writes pre-encoded frames, reads the framed answers); the
     ``PufferIpcClient`` runs in a thread of this process. Also the adapter's parsing alone
     (JSON -> ``PufferMessages`` -> ``decide`` -> JSON answer, no socket);
   * PCC: the module functions ``give_sample`` + ``get_rate`` after ``bind``, one per monitor
     interval (the samples as PCC-Uspace passes them, built from the simulated statistics).

   The adapters' answers are compared with the runtime's on the same decisions.

Targets (the deployment issue), median and 99th percentile of ``decide`` each: under 1 ms per
ABR decision with the Pensieve network, under 2 ms with Gelato's.
"""

from __future__ import annotations

import single_thread  # noqa: F401,E402  (one thread; must precede numpy)

import argparse
import copy
import gc
import http.client
import json
import os
import platform
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from plume.deploy.adapters import pcc, pensieve, puffer
from plume.deploy.export import contract_for, export_controller, export_policy
from plume.deploy.replay import simulated_sessions
from plume.deploy.runtime import load_controller
from plume.envs.registry import get_env

TARGETS_US = {"gelato": 2000.0, "pensieve": 1000.0}
"""decide() latency targets per ABR decision, microseconds."""
LEARNED = {
    # key: (env, params, network, hidden sizes, activation)
    "gelato": ("abr", {"variant": "gelato"}, "gelato", [256], "relu"),
    "pensieve": ("abr", {"variant": "pensieve"}, "pensieve", [128], "relu"),
    "cc": ("cc", {}, "mlp", [64, 64], "tanh"),
    "lb": ("lb", {}, "mlp", [256, 128], "gelu"),
}
RULES = [("gelato", "abr", {"variant": "gelato"}, "bba"),
         ("gelato", "abr", {"variant": "gelato"}, "robust_mpc"),
         ("pensieve", "abr", {"variant": "pensieve"}, "bba"),
         ("pensieve", "abr", {"variant": "pensieve"}, "robust_mpc"),
         ("cc", "cc", {}, "aimd"),
         ("lb", "lb", {}, "least_work_left")]
MI_S = 0.125
"""Monitor interval of the PCC samples built from the simulated statistics, seconds."""
WAIT_S = 20.0
"""Bound on every wait for a socket or a server thread."""


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


@dataclass
class Stream:
    """Sessions of decision inputs: ``start(reset_kwargs)`` before each session (untimed),
    ``call(input)`` timed per decision, ``end()`` after each session (untimed)."""

    sessions: list[tuple[dict[str, Any], list[Any]]]
    call: Callable[[Any], Any]
    start: Callable[[dict[str, Any]], None] = lambda kw: None
    end: Callable[[], None] = lambda: None


@dataclass
class Result:
    name: str
    ns: np.ndarray
    answers: list = field(default_factory=list, repr=False)
    capped: bool = False

    @property
    def median_us(self) -> float:
        return float(np.median(self.ns)) / 1e3

    @property
    def p99_us(self) -> float:
        return float(np.percentile(self.ns, 99)) / 1e3


def measure(name: str, stream: Stream, decisions: int, warmup: int, max_s: float) -> Result:
    """``warmup`` untimed decisions (``max_s / 2`` at most), then up to ``decisions`` timed
    ones (``max_s`` at most), cycling through the stream's sessions in order (so two streams
    over the same sessions take the same decisions in the same order). ``answers`` holds
    every decision's answer, the warm-up's included."""
    clock = time.perf_counter_ns
    times = np.empty(decisions, dtype=np.int64)
    answers: list = []
    done, seen, capped = 0, 0, False
    deadline = time.monotonic() + (max_s / 2.0 if warmup else max_s)
    gc.collect()
    while done < decisions and not capped:
        for kw, inputs in stream.sessions:
            stream.start(kw)
            for item in inputs:
                if seen < warmup:
                    answers.append(stream.call(item))
                    seen += 1
                    if seen == warmup or time.monotonic() > deadline:
                        seen = warmup
                        deadline = time.monotonic() + max_s
                    continue
                t0 = clock()
                answer = stream.call(item)
                times[done] = clock() - t0
                answers.append(answer)
                done += 1
                if done == decisions:
                    break
                if time.monotonic() > deadline:
                    capped = True
                    break
            stream.end()
            if done == decisions or capped:
                break
    return Result(name, times[:done], answers, capped)


def agreement(reference: Result, other: Result, rel: float = 0.0) -> str:
    """How many of the decisions both took (warm-up included) got the same answer."""
    n = min(len(reference.answers), len(other.answers))
    a = np.asarray(reference.answers[:n], dtype=float)
    b = np.asarray(other.answers[:n], dtype=float)
    same = int(np.sum(np.abs(a - b) <= rel * np.maximum(np.abs(a), 1.0)))
    return f"{same}/{n}"


# --------------------------------------------------------------------------------------
# Exports and decision inputs
# --------------------------------------------------------------------------------------


def learned_export(key: str, out: Path, n_traces: int) -> Path:
    """An untrained network of the paper's architecture for ``key``, exported (ONNX + the
    parity check) on observations recorded from the env's test traces under random actions."""
    import torch

    from plume.agents.base import GreedyPolicy
    from plume.agents.networks import ActorCritic

    env_name, kw, network, hidden, activation = LEARNED[key]
    spec = get_env(env_name)
    params = spec.params(**kw)
    traces = spec.load_builtin(spec.default_dataset(params), "test")
    traces = traces.subset(list(range(min(n_traces, len(traces)))))
    env = spec.make(traces, None, None, mode="test", seed=None, params=params)
    obs_space, act_space = env.single_observation_space, env.single_action_space
    rng = np.random.default_rng(0)
    obs, _ = env.reset()
    recorded = [obs]
    for _ in range(40):
        if hasattr(act_space, "n"):
            actions = rng.integers(0, act_space.n, env.num_envs)
        else:
            actions = rng.uniform(-0.5, 0.5, (env.num_envs, *act_space.shape)).astype(np.float32)
        obs, *_ = env.step(actions)
        recorded.append(obs)
    torch.manual_seed(0)
    ac = ActorCritic(obs_space, act_space, hidden, activation, network=network)
    actor = copy.deepcopy(ac.actor).eval()
    if hasattr(act_space, "n"):
        greedy = GreedyPolicy(actor, "logits", {"kind": "argmax", "start": 0})
    else:
        greedy = GreedyPolicy(actor, "mean", {"kind": "clip", "low": act_space.low.tolist(),
                                              "high": act_space.high.tolist()})
    contract = contract_for(spec, params, {"algorithm": f"untrained {network} {hidden}"},
                            {"benchmark": "bench_deploy"})
    export_policy(greedy, np.concatenate(recorded), contract, out)
    return out


def runtime_sessions(export: Path, n: int) -> list[tuple[dict[str, Any], list[Any]]]:
    """(reset kwargs, measurements) of the simulated sessions of ``export``."""
    return [(s.reset_kwargs, [step.measurement for step in s.steps])
            for s in simulated_sessions(export, n=n)]


def decide_stream(ctrl, sessions) -> Stream:
    return Stream(sessions, ctrl.decide, lambda kw: ctrl.reset(**kw))


def built_observations(ctrl, sessions) -> list[np.ndarray]:
    """The observations the runtime builds on the sessions' measurements."""
    out = []
    for kw, measurements in sessions:
        ctrl.reset(**kw)
        for m in measurements:
            ctrl.decide(m)
            out.append(ctrl.observation.copy())
    return out


# --------------------------------------------------------------------------------------
# Pensieve (HTTP)
# --------------------------------------------------------------------------------------


def pensieve_lasts(sessions) -> list[tuple[dict[str, Any], list[dict]]]:
    """Per session, the ``last`` measurements the player POSTs: after chunk k (lastRequest k)
    the measurement of the simulator's step k + 1; after the last chunk that chunk's own
    (its level the simulator's last decision), as the adapter tests replay it."""
    out = []
    for s in sessions:
        steps = s.steps
        lasts = [step.measurement["last"] for step in steps[1:]]
        lasts.append({**steps[-1].measurement["last"], "level": int(steps[-1].action)})
        out.append(({}, lasts))
    return out


def player_post(request: int, last: dict) -> bytes:
    """The player's POST body after chunk ``request`` (start time 0: finish - start is the
    download time to the bit), with the fields the player sends and the server ignores."""
    return json.dumps({
        "nextChunkSize": 0, "Type": "RL", "lastquality": last["level"],
        "buffer": last["buffer_s"], "bufferAdjusted": last["buffer_s"] - 4.55,
        "bandwidthEst": 0, "lastRequest": request, "RebufferTime": 0.0,
        "lastChunkFinishTime": last["delay_ms"], "lastChunkStartTime": 0,
        "lastChunkSize": last["size_bytes"]}).encode()


def pensieve_rows(export: Path, sim, args) -> list[tuple[Result, Result, str]]:
    lasts = pensieve_lasts(sim)
    n_chunks = load_controller(export).contract["constants"]["n_chunks"]
    bodies = [(kw, [player_post(k, last) for k, last in enumerate(ls)]) for kw, ls in lasts]
    refresh = player_post(n_chunks, lasts[0][1][-1])

    ctrl = load_controller(export)
    base = measure("runtime decide", decide_stream(
        ctrl, [(kw, [{"last": last} for last in ls]) for kw, ls in lasts]), *args)

    decisions = pensieve.PensieveDecisions(str(export))
    direct = measure("PensieveDecisions.answer (no HTTP)", Stream(
        bodies, lambda body: int(decisions.answer(body, "127.0.0.1")),
        end=lambda: decisions.answer(refresh, "127.0.0.1")), *args)

    server = pensieve.make_server(str(export), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    conn = None
    try:
        thread.start()
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1],
                                          timeout=WAIT_S)

        def post(body: bytes) -> int:
            conn.request("POST", "/", body=body)
            reply = conn.getresponse()
            text = reply.read()
            if reply.status != 200:
                raise RuntimeError(f"pensieve server answered {reply.status}: {text!r}")
            return int(text)

        def end() -> None:
            conn.request("POST", "/", body=refresh)
            conn.getresponse().read()

        http_rt = measure("HTTP round trip (keep-alive)", Stream(bodies, post, end=end), *args)
    finally:
        if conn is not None:
            conn.close()
        server.shutdown()
        server.server_close()
        thread.join(WAIT_S)
    return [(base, direct, agreement(base, direct)), (base, http_rt, agreement(base, http_rt))]


# --------------------------------------------------------------------------------------
# Puffer (python_ipc over a Unix socket)
# --------------------------------------------------------------------------------------


def ssim_index(db: float) -> float:
    """Puffer sends SSIM indices; the simulator's traces hold dB."""
    return 1.0 - 10.0 ** (-db / 10.0)


def puffer_frames(sessions) -> list[tuple[dict[str, Any], list[bytes]]]:
    """Puffer's framed requests (2-byte big-endian length + JSON) for the runtime's gelato
    measurements, in Puffer's units; ``cum_rebuf`` accumulates the stalls per video."""
    out = []
    for kw, measurements in sessions:
        frames, cum_rebuf = [], 0.0
        for m in measurements:
            last = m["last"]
            if last is None:
                past = dict.fromkeys(("delay", "ssim", "size", "cwnd", "in_flight", "min_rtt",
                                      "rtt", "delivery_rate"), 0.0)
                buffer = 0.0
            else:
                cum_rebuf += last["stall_s"]
                past = {"delay": last["delay_s"], "ssim": ssim_index(last["ssim_db"]),
                        "size": last["size_mb"], "cwnd": 10, "in_flight": 2, "min_rtt": 0.04,
                        "rtt": 0.05, "delivery_rate": 1.5}
                buffer = last["buffer_s"]
            body = json.dumps({
                "past_chunk": past, "buffer": buffer, "cum_rebuf": cum_rebuf,
                "sizes": [list(map(float, row)) for row in m["next_sizes_mb"]],
                "ssims": [[ssim_index(float(v)) for v in row] for row in m["next_ssim_db"]],
                "channel_name": "bench", "ts": 180180}).encode()
            frames.append(struct.pack("!H", len(body)) + body)
        out.append((kw, frames))
    return out


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the controller closed the stream")
        data += chunk
    return data


def puffer_rows(export: Path, sessions, args) -> list[tuple[Result, Result, str]]:
    frames = puffer_frames(sessions)
    base = measure("runtime decide", decide_stream(load_controller(export), sessions), *args)

    ctrl, messages = load_controller(export), puffer.PufferMessages()

    def parse_and_decide(frame: bytes) -> int:
        """What the client does per frame, less the socket: JSON in, measurement, decision,
        JSON out."""
        msg = json.loads(frame[2:].decode("utf-8"))
        first, measurement = messages.measurement(msg)
        if first:
            ctrl.reset()
        action = int(ctrl.decide(measurement))
        messages.accept(msg)
        json.dumps({"action": action}, separators=(",", ":")).encode("utf-8")
        return action

    direct = measure("parse + decide (no socket)", Stream(frames, parse_and_decide), *args)

    folder = tempfile.mkdtemp(prefix="plume-bench-")  # short: Unix paths are <= 107 bytes
    path = os.path.join(folder, "ipc")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn, thread, result = None, None, {}
    try:
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(WAIT_S)
        client = puffer.PufferIpcClient(load_controller(export), path)

        def serve() -> None:
            try:
                result.update(client.serve())
            finally:
                client.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        conn, _ = listener.accept()
        conn.settimeout(WAIT_S)

        def round_trip(frame: bytes) -> int:
            conn.sendall(frame)
            (n,) = struct.unpack("!H", recv_exactly(conn, 2))
            answer = json.loads(recv_exactly(conn, n))
            if "error" in answer:
                raise RuntimeError(f"puffer client answered an error: {answer['error']}")
            return int(answer["action"])

        ipc = measure("Unix socket round trip", Stream(frames, round_trip), *args)
    finally:
        if conn is not None:
            conn.close()  # Puffer ends the stream: the client ends its session
        if thread is not None:
            thread.join(WAIT_S)
        listener.close()
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(folder)
    if result.get("errors"):
        print(f"  (puffer client reported {result['errors']} error frame(s))")
    return [(base, direct, agreement(base, direct)), (base, ipc, agreement(base, ipc))]


# --------------------------------------------------------------------------------------
# PCC (give_sample / get_rate)
# --------------------------------------------------------------------------------------


def pcc_sample(k: int, m: dict) -> tuple:
    """give_sample's arguments after flow_id for the simulated statistics of monitor interval
    k, as PCC-Uspace passes an interval: bytes, seconds since the flow's first interval, the
    first and last ACK latency (s), packet size, utility."""
    start, spread = k * MI_S, m["latency_inflation"] * MI_S / 2.0
    sent = m["sending_rate_bps"] / 8.0 * MI_S
    rtts = [m["latency_s"] - spread, m["latency_s"] + spread]
    return (sent, m["receiving_rate_bps"] / 8.0 * MI_S, m["loss"] * sent, start, start + MI_S,
            start + rtts[0], start + MI_S + rtts[1], rtts, 1500, 0.0)


def as_packets(args: tuple) -> dict[str, Any]:
    """The measurement the PCC adapter hands ``decide`` for these give_sample arguments."""
    sent, acked, lost, start, end, _, _, rtts, size, _ = args
    return {"bytes_sent": sent, "bytes_acked": acked, "bytes_lost": lost, "send_start_s": start,
            "send_end_s": end, "rtt_samples_s": [float(r) for r in rtts], "packet_size": size}


def pcc_rows(export: Path, sessions, args) -> list[tuple[Result, Result, str]]:
    samples = [(kw, [pcc_sample(k, m) for k, m in enumerate(ms[1:], 1)]) for kw, ms in sessions]
    flows = pcc.bind(str(export))
    try:
        rate = flows.initial_rate_bps
        ctrl = load_controller(export)

        def start(kw: dict) -> None:
            ctrl.reset(initial_rate_bps=rate)
            ctrl.decide(None)  # the flow's first decision, made by init() in the adapter

        stats = measure("runtime decide (statistics)", Stream(
            [(kw, ms[1:]) for kw, ms in sessions], ctrl.decide, start), *args)
        base = measure("runtime decide (packets)", Stream(
            [(kw, [as_packets(a) for a in s]) for kw, s in samples], ctrl.decide, start), *args)

        def give_and_get(a: tuple) -> float:
            pcc.give_sample(0, *a)
            return pcc.get_rate(0)

        helper = measure("give_sample + get_rate", Stream(
            samples, give_and_get, lambda kw: pcc.init(0)), *args)
    finally:
        pcc.unbind()
    return [(base, stats, agreement(base, stats, 1e-6)),
            (base, helper, agreement(base, helper, 1e-9))]


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def us(x: float) -> str:
    return f"{x:,.1f}"


def verdict(value_us: float, target_us: float) -> str:
    return "PASS" if value_us < target_us else "MISS"


def row(label: str, r: Result, ratio: float | None, extra: str = "") -> str:
    n = f"{len(r.ns)}{'*' if r.capped else ''}"
    ratio_text = f"{ratio:.2f}" if ratio is not None else "-"
    return (f"{label:<50} {n:>6} {us(r.median_us):>10} {us(r.p99_us):>10} {ratio_text:>8}"
            f"{extra}")


def header(ratio_name: str, extra: str = "") -> str:
    line = (f"{'':<50} {'n':>6} {'median us':>10} {'p99 us':>10} {ratio_name:>8}{extra}")
    return line + "\n" + "-" * len(line)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=5000,
                        help="timed decisions per row (default 5000)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed decisions first")
    parser.add_argument("--sessions", type=int, default=16,
                        help="simulated sessions (test traces) per export")
    parser.add_argument("--max-seconds", type=float, default=10.0,
                        help="time bound per row (warm-up: half as much more); a row cut short is "
                        "marked *")
    parser.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: lowest)")
    parser.add_argument("--quick", action="store_true",
                        help="500 decisions, 50 warm-up, 4 sessions per export")
    args = parser.parse_args()
    if args.quick:
        args.decisions, args.warmup, args.sessions = 500, 50, 4
    return args


def learned_section(exports, inputs, timing) -> dict[str, Result]:
    """1. Learned policies through the runtime; returns each env's decide() result."""
    print("1. Learned policies through the runtime (ratio: x the ONNX model alone)")
    print(header("x model", f" {'decide-model us':>16}"))
    learned_decide: dict[str, Result] = {}
    for key in LEARNED:
        ctrl = load_controller(exports[key])
        observations = built_observations(ctrl, inputs[key])
        policy = ctrl.policy
        model = measure("outputs", Stream([({}, observations)], policy.outputs), *timing)
        act = measure("act", Stream([({}, observations)], policy.act), *timing)
        ctrl = load_controller(exports[key])
        decide = measure("decide", Stream(inputs[key], ctrl.decide,
                                          lambda kw, c=ctrl: c.reset(**kw)), *timing)
        learned_decide[key] = decide
        dim = observations[0].shape[-1]
        print(row(f"{key} (obs {dim}): policy.outputs(obs)", model, 1.0))
        print(row(f"{key}: policy.act(obs) (model + rule)", act,
                  act.median_us / model.median_us))
        print(row(f"{key}: decide(measurement)", decide, decide.median_us / model.median_us,
                  f" {us(decide.median_us - model.median_us):>16}"))
    print()
    for key, target in TARGETS_US.items():
        r = learned_decide[key]
        print(f"target: {key} decide() < {target / 1000:g} ms per decision: "
              f"median {us(r.median_us)} us {verdict(r.median_us, target)}, "
              f"p99 {us(r.p99_us)} us {verdict(r.p99_us, target)}")
    print()
    return learned_decide


def rules_section(root: Path, learned_decide, sessions_per_export: int, timing) -> None:
    """2. Classic rules through the runtime."""
    print("2. Classic rules through the runtime (ratio: x the learned decide() of the env)")
    print(header("x learned"))
    for key, env, kw, rule in RULES:
        out = export_controller(env, kw, rule, root / f"{key}-{rule}")
        sessions = runtime_sessions(out, sessions_per_export)
        r = measure(rule, decide_stream(load_controller(out), sessions), *timing)
        print(row(f"{key}: {rule} decide(measurement)", r,
                  r.median_us / learned_decide[key].median_us))
    print()


def adapters_section(exports, sims, inputs, timing) -> None:
    """3. Adapters beside the runtime, on the same decisions."""
    print("3. Adapters beside the runtime's decide() on the same decisions "
          "(ratio: x runtime median; overhead = adapter median - runtime median)")
    print(header("x runtime", f" {'overhead us':>12} {'same answers':>13}"))
    cases = [("Pensieve (learned pensieve)", pensieve_rows(exports["pensieve"],
                                                           sims["pensieve"], timing)),
             ("Puffer (learned gelato)", puffer_rows(exports["gelato"], inputs["gelato"],
                                                     timing)),
             ("PCC (learned aurora)", pcc_rows(exports["cc"], inputs["cc"], timing))]
    for title, rows in cases:
        base = rows[0][0]
        print(row(f"{title}: {base.name}", base, 1.0))
        for reference, r, same in rows:
            print(row(f"  {r.name}", r, r.median_us / reference.median_us,
                      f" {us(r.median_us - reference.median_us):>12} {same:>13}"))
    print()
    print("Pensieve and Puffer round trips: server / controller in a thread of this "
          "process, on the same core as the client.")


def main() -> None:
    args = _arguments()
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
        pinned = f"cpu {args.cpu}"
    else:
        pinned = single_thread.pin_to_one_cpu()

    import onnxruntime
    import torch

    torch.set_num_threads(1)
    timing = (args.decisions, args.warmup, args.max_seconds)
    started = time.monotonic()
    print(f"Deployment decision latency, one decision per call, pinned: {pinned}, "
          f"onnxruntime {onnxruntime.__version__} (1 thread), numpy {np.__version__}, "
          f"Python {platform.python_version()}")
    print(f"{args.decisions} timed decisions per row after {args.warmup} warm-up "
          f"(at most {args.max_seconds:g} s per row, * = cut short), inputs from "
          f"{args.sessions} simulated sessions per export; untrained networks of the paper's "
          f"architectures")
    print()
    with tempfile.TemporaryDirectory(prefix="plume-bench-deploy-") as tmp:
        root = Path(tmp)
        exports = {key: learned_export(key, root / key, n_traces=8) for key in LEARNED}
        sims = {key: simulated_sessions(exports[key], n=args.sessions) for key in LEARNED}
        inputs = {key: [(s.reset_kwargs, [step.measurement for step in s.steps])
                        for s in sims[key]] for key in LEARNED}
        print(f"exports and sessions ready in {time.monotonic() - started:.1f} s")
        print()
        learned_decide = learned_section(exports, inputs, timing)
        rules_section(root, learned_decide, args.sessions, timing)
        adapters_section(exports, sims, inputs, timing)
    print(f"total {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
