"""The trace-driven link emulator, calibrated with real kernel traffic between two network
namespaces: idle RTT, droptail drops, TCP goodput on a constant link, delivered bytes following
a stepping trace; the host's interfaces and routes untouched; nothing left after a SIGKILL.

A calibration is judged with the link's own lateness (how late it sent its packets; see
``plume.emulation.link``): the idle RTT is compared with the delay plus what the link and the
probes measured, and a calibration that misses while the link says it fell behind its schedule
(a loaded machine) skips saying so, with the numbers, rather than failing on a biased number.

Every test needs CAP_NET_ADMIN and /dev/net/tun (root on CI); elsewhere they skip with the
reason. Unit tests of the link's queue arithmetic need neither. Commands run through the
interpreter running the tests (``sys.executable -m ...``), never a PATH."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from plume.emulation import Emulator, LinkSpec, Schedule, can_emulate
from plume.emulation.link import Direction

REASON = can_emulate()
needs_namespaces = pytest.mark.skipif(REASON is not None, reason=str(REASON))
PROBE = [sys.executable, "-m", "plume.emulation.probes"]


def _probe(emu: Emulator, side: str, *args: str, timeout: float = 60) -> dict:
    done = emu.run(side, [*PROBE, *args], timeout=timeout, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _start(emu: Emulator, side: str, *args: str) -> subprocess.Popen:
    process = emu.popen(side, [*PROBE, *args], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)  # the socket is bound before the other side sends
    return process


def _result(process: subprocess.Popen, timeout: float = 60) -> dict:
    out, _ = process.communicate(timeout=timeout)
    return json.loads(out)


def _calibrated(ok: bool, what: str, stats: dict | None) -> None:
    """Assert a calibration, unless it missed while the link says it fell behind its
    schedule: then the number is biased by the machine's load, and the test skips saying so."""
    lateness = (stats or {}).get("lateness") or {}
    if not ok and lateness.get("within_tolerance") is False:
        pytest.skip(f"{what}: the link fell behind its schedule on this busy machine (p99 "
                    f"lateness {lateness['p99_ms']} ms > {lateness['tolerance_ms']} ms, max "
                    f"{lateness['max_ms']} ms), so the number is biased, not a calibration")
    assert ok, f"{what}; link lateness: {lateness or 'not reported'}"


def _network_namespaces_in_use() -> set[str]:
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found.add(os.readlink(f"/proc/{pid}/ns/net"))
        except OSError:  # the process ended meanwhile
            pass
    return found


def _host_network() -> str:
    commands = (["ip", "-o", "link"], ["ip", "-o", "addr"], ["ip", "route"],
                ["ip", "-6", "route"], ["tc", "qdisc"])
    return "\n".join(subprocess.run(c, capture_output=True, text=True).stdout for c in commands)


# ------------------------------------------------------------------- the link's arithmetic
def test_a_droptail_queue_in_packets_keeps_exactly_its_size():
    link = Direction(LinkSpec(Schedule(np.array([10]), 10), delay_ms=5, queue_packets=2))
    delivered = []
    for _ in range(5):
        link.arrive(bytes(1500), 0.0)
    link.service(4.9, delivered.append)  # still in the delay line
    assert delivered == [] and link.counts["queue_drops"] == 0
    link.service(30.0, delivered.append)  # opportunities at 10 and 20 ms
    assert len(delivered) == 2 and link.counts["queue_drops"] == 3
    assert link.per_second == [3000]


def test_an_opportunity_finishes_one_packet_and_starts_the_next():
    """Mahimahi's LinkQueue: 1500 bytes per opportunity, a packet may span two."""
    link = Direction(LinkSpec(Schedule(np.array([1]), 1)))
    delivered = []
    for _ in range(3):
        link.arrive(bytes(1000), 0.0)
    link.service(1.0, delivered.append)  # 1500 bytes: packet 1 and half of packet 2
    assert len(delivered) == 1
    link.service(2.0, delivered.append)  # the rest of 2 and all of 3
    assert len(delivered) == 3


def test_a_packet_cannot_use_an_opportunity_that_passed_before_it_arrived():
    link = Direction(LinkSpec(Schedule(np.array([10]), 10), delay_ms=5))
    delivered = []
    link.service(95.0, delivered.append)  # idle: the opportunities up to 95 ms are lost
    link.arrive(bytes(100), 95.0)  # joins the queue at 100 ms
    link.service(99.9, delivered.append)
    assert delivered == []
    link.service(100.0, delivered.append)
    assert len(delivered) == 1 and link.per_second == [100]


def test_a_bandwidth_series_becomes_delivery_opportunities():
    # 12 Mbit/s = one 1500-byte packet per millisecond; 6 Mbit/s = one every 2 ms.
    schedule = Schedule.from_bandwidth(np.array([0.0, 1.0]), np.array([12.0, 6.0]), 2.0)
    assert schedule.period_ms == 2000 and len(schedule.times_ms) == 1000 + 500
    assert schedule.times_ms[:3].tolist() == [1, 2, 3]
    assert schedule.times_ms[1000:1003].tolist() == [1002, 1004, 1006]


# ------------------------------------------------------------------- calibration (namespaces)
OPPORTUNITY_WAIT_MS = 1.0
"""At 12 Mbit/s an opportunity every millisecond: a packet released from the delay line waits
less than this for the next one, in each direction."""


@needs_namespaces
def test_idle_rtt_is_twice_the_one_way_delay_plus_what_the_link_and_probes_measured():
    """40 probes over a 20 ms link each way. None is faster than the 40 ms of delay, and the
    median is within 40 ms plus what each part adds for 9 packets in 10: the wait for each
    direction's next opportunity (< 1 ms), the link's lateness p90 in each direction counted
    twice (it sends late, and reads arrivals late: the same loop), and the p90 of the probes'
    own round trip over loopback in the client namespace (measured here; idle: median 41.9 ms,
    lateness p90 0.1 ms each way, loopback 0.1 ms, so a bound near 42.6 ms)."""
    link = LinkSpec(Schedule.constant(12), delay_ms=20)
    with Emulator(link, link) as emu:
        _start(emu, "server", "udp-echo", "9000", "10")
        rtts = _probe(emu, "client", "udp-ping", emu.address("server"), "9000", "40",
                      "0.02")["rtt_s"]
        _start(emu, "client", "udp-echo", "9001", "3")
        local = _probe(emu, "client", "udp-ping", "127.0.0.1", "9001", "20", "0.005")["rtt_s"]
    assert len(rtts) == 40 and len(local) == 20
    assert min(rtts) * 1000 >= 40.0  # a packet never leaves before its delay has passed
    late = emu.stats["down"]["lateness"]["p90_ms"] + emu.stats["up"]["lateness"]["p90_ms"]
    bound = 40.0 + 2 * OPPORTUNITY_WAIT_MS + 2 * late + np.percentile(local, 90) * 1000
    median = statistics.median(rtts) * 1000
    _calibrated(median <= bound, f"median RTT {median:.2f} ms, at most {bound:.2f} ms "
                f"expected", emu.stats)


@needs_namespaces
@pytest.mark.parametrize("bound,kept", [({"queue_packets": 10}, 10),
                                        ({"queue_bytes": 5000}, 4)])
def test_the_queue_drops_exactly_past_its_size(bound, kept):
    """50 datagrams of 1000 bytes (1028 as IP packets) at once into a link that opens once
    every 100 ms: the queue keeps 10 packets, or the 4 that fit in 5000 bytes."""
    slow = LinkSpec(Schedule(np.array([100]), 100), **bound)
    with Emulator(slow, LinkSpec(Schedule.constant(12))) as emu:
        sink = _start(emu, "client", "udp-sink", "9000", "1.5")
        _probe(emu, "server", "udp-burst", emu.address("client"), "9000", "50", "1000")
        received = _result(sink)
    assert received["packets"] == kept
    assert emu.stats["down"]["queue_drops"] == 50 - kept


def _goodput(seconds: float, make=Emulator) -> tuple[float, float, dict | None]:
    """(measured, expected) TCP goodput in bit/s on a constant 12 Mbit/s link (5 ms each
    way), counted after the first second (slow start), and the link's counters (None for
    Mahimahi's); ``make(down, up)`` the link."""
    link = LinkSpec(Schedule.constant(12), delay_ms=5)
    with make(link, link) as emu:
        _start(emu, "server", "tcp-source", "9001", str(seconds + 2))
        sink = _probe(emu, "client", "tcp-sink", emu.address("server"), "9001", str(seconds),
                      timeout=seconds + 30)
    per_second = sink["per_second"][1:int(seconds)]
    measured = 8.0 * sum(per_second) / len(per_second)
    # Payload per 1500-byte packet: less 20 bytes of IP header and 32 of TCP header with
    # timestamps (Linux's default), i.e. the connection's MSS of 1448.
    return measured, 12e6 * (1500 - 20 - 32) / 1500, getattr(emu, "stats", None)


@needs_namespaces
def test_tcp_goodput_on_a_constant_link_is_its_payload_capacity():
    measured, expected, stats = _goodput(5.0)
    _calibrated(abs(measured / expected - 1.0) <= 0.03,
                f"goodput {measured:.0f} bit/s, expected {expected:.0f} within 3 %", stats)


@needs_namespaces
@pytest.mark.slow
def test_thirty_seconds_of_tcp_goodput_is_the_payload_capacity():
    measured, expected, stats = _goodput(30.0)
    _calibrated(abs(measured / expected - 1.0) <= 0.03,
                f"goodput {measured:.0f} bit/s, expected {expected:.0f} within 3 %", stats)


@needs_namespaces
def test_delivered_bytes_follow_a_stepping_trace():
    """4, 8 then 2 Mbit/s for 1 s each, looping, flooded at 12 Mbit/s from about 0.5 s on:
    bytes delivered in each whole second of the flood within 5 % of the trace's rate."""
    steps = Schedule.from_bandwidth(np.array([0.0, 1.0, 2.0]), np.array([4.0, 8.0, 2.0]), 3.0)
    with Emulator(LinkSpec(steps, queue_packets=100), LinkSpec(Schedule.constant(12))) as emu:
        sink = _start(emu, "client", "udp-sink", "9000", "6")
        _probe(emu, "server", "udp-flood", emu.address("client"), "9000", "12", "4.8", "1472")
        received = _result(sink)
    delivered = emu.stats["down"]["bytes_per_second"][1:5]  # seconds 1-4 of the link's clock
    expected = np.array([8e6, 2e6, 4e6, 8e6]) / 8
    _calibrated(bool(np.all(np.abs(np.asarray(delivered) / expected - 1.0) <= 0.05)),
                f"bytes per second {delivered}, expected {expected.tolist()} within 5 %",
                emu.stats)
    assert received["bytes"] == emu.stats["down"]["bytes_out"] - 28 * received["packets"]


@needs_namespaces
def test_the_host_network_is_unchanged_during_and_after_a_run():
    before = _host_network()
    link = LinkSpec(Schedule.constant(12), delay_ms=5)
    with Emulator(link, link) as emu:
        _start(emu, "server", "udp-echo", "9000", "3")
        _probe(emu, "client", "udp-ping", emu.address("server"), "9000", "5", "0.01")
        during = _host_network()
        # Nothing is routable from a namespace but the other side.
        leak = emu.run("client", [*PROBE, "udp-burst", "8.8.8.8", "53", "1", "10"],
                       timeout=30, capture_output=True, text=True)
    assert leak.returncode != 0 and "unreachable" in leak.stderr.lower()
    assert during == before and _host_network() == before


@needs_namespaces
def test_a_killed_emulator_leaves_no_process_and_no_namespace():
    script = textwrap.dedent("""
        import json, time
        from plume.emulation import Emulator, LinkSpec, Schedule
        link = LinkSpec(Schedule.constant(12))
        with Emulator(link, link) as emu:
            emu.popen("server", ["sleep", "60"])
            pids = emu.pids()
            print(json.dumps({"pids": pids["server"] + pids["client"] + pids["link"]
                              + pids["apps"]}), flush=True)
            time.sleep(60)
    """)
    emulator = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(emulator.stdout.readline())["pids"]
        namespaces = {os.readlink(f"/proc/{pid}/ns/net") for pid in pids[:2]}
        os.kill(emulator.pid, signal.SIGKILL)
        emulator.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
        assert not namespaces & _network_namespaces_in_use()
    finally:
        if emulator.poll() is None:
            emulator.kill()


# ------------------------------------------------------------------- plume-emulate jobs
EMULATE = [sys.executable, "-m", "plume.harness.apps.emulate"]
"""plume-emulate, through the interpreter running the tests (a venv need not be activated)."""


def _emulate(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([*EMULATE, f"paths.root={tmp_path}", "exp_name=e", *overrides],
                          capture_output=True, text=True, timeout=300)


def _run_dir(tmp_path):
    (status,) = tmp_path.glob("e/*/seed=0/status.json")
    return status.parent


def test_a_job_that_cannot_be_emulated_is_refused_in_one_line_naming_the_key(tmp_path):
    from plume.emulation.job import EmulationSection

    done = _emulate(tmp_path, "env=abr", "controller=bba")  # the Gelato variant
    assert done.returncode == 2 and "env.variant=pensieve" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "e").exists()
    done = _emulate(tmp_path, "env=abr", "env.variant=pensieve")  # no policy
    assert done.returncode == 2 and "controller=<name> or export=<folder>" in done.stderr
    with pytest.raises(ValueError, match="parallel must be >= 1"):
        EmulationSection(parallel=0)
    with pytest.raises(ValueError, match="lateness_tolerance_ms must be a number of "
                                         "milliseconds > 0, got 0.0"):
        EmulationSection(lateness_tolerance_ms=0.0)


@needs_namespaces
def test_abr_sessions_over_real_tcp_write_the_gap_against_the_simulator(tmp_path):
    """Two Pensieve-setting traces, 2 chunks each, BBA: both modes on the same traces in the
    simulator's eval.parquet schema, the per-chunk records and the gap table; the emulated
    chunks took real time; the report shows both modes and is never pooled."""
    import pandas as pd

    from plume.envs.registry import get_env
    from plume.report.runs import RunScanError, scan_runs

    started = time.monotonic()
    done = _emulate(tmp_path, "env=abr", "env.variant=pensieve", "controller=bba",
                    "emulation.traces=2", "emulation.parallel=2", "emulation.chunks=2")
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = _run_dir(tmp_path)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed"
    # Both sessions' links recorded how late they ran (the verdict depends on the machine).
    lateness = status["link_lateness"]
    assert lateness["count"] > 100 and lateness["tolerance_ms"] == 1.0
    assert lateness["unmeasured_traces"] == [] and lateness["within_tolerance"] in (True, False)
    kept = "Link lateness (actual minus scheduled departure)" in (run_dir / "gap.md").read_text()
    assert kept is lateness["within_tolerance"]
    frame = pd.read_parquet(run_dir / "eval.parquet")
    fields = [m.name for m in get_env("abr").episode_fields]
    assert {"test_set", "trace", "trace_id", "label", "cluster", "score", "progress",
            "env_steps", "mode", *fields} <= set(frame.columns)
    assert sorted(frame["mode"]) == ["emulation"] * 2 + ["simulation"] * 2
    assert (frame["length"] == 2).all() and (frame["video_seconds"] == 8.0).all()
    assert set(frame["test_set"]) == {"pensieve_synthetic"}
    chunks = pd.read_parquet(run_dir / "steps.parquet")
    emulated = chunks[chunks["mode"] == "emulation"]
    # Every emulated download took at least the link's round trip (2 x 40 ms).
    assert (emulated["delay"] >= 0.08).all()
    # ... and happened in real time (the two sessions ran side by side).
    assert emulated.groupby("trace")["delay"].sum().max() <= time.monotonic() - started
    gap = pd.read_csv(run_dir / "gap.csv")
    assert list(gap["metric"]) == ["score", "mean_level", "stall", "throughput_mbps"]
    assert gap["gap_lo"].isna().all()  # 2 traces: no interval
    assert "| score |" in (run_dir / "gap.md").read_text()
    with pytest.raises(RunScanError, match="only emulation run directories"):
        scan_runs(tmp_path)  # never pooled with the simulator's runs
    # plume-report shows both modes and the gap, recomputed from the run's eval.parquet.
    from plume.report.cli import main as report

    assert report([str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Simulation and emulation (plume-emulate)" in text and "| bba | abr |" in text
    assert "| link lateness p99 (ms) |" in text  # each run's mark, beside its gap
    assert (tmp_path / "report" / "figures" / "emulation_gap.png").is_file()
    table = pd.read_csv(tmp_path / "report" / "tables" / "emulation_gap.csv")
    np.testing.assert_allclose(table["gap"], gap["gap"])
    per_trace = pd.read_csv(tmp_path / "report" / "tables" / "emulation_per_trace.csv")
    assert len(per_trace) == 2 * 4  # traces x metrics
    # Typed again, the completed job is skipped.
    again = _emulate(tmp_path, "env=abr", "env.variant=pensieve", "controller=bba",
                     "emulation.traces=2", "emulation.parallel=2", "emulation.chunks=2")
    assert again.returncode == 0 and "already completed" in again.stderr + again.stdout


@needs_namespaces
def test_cc_flows_over_real_udp_write_the_gap_against_the_fluid_model(tmp_path):
    """AIMD on two Aurora test links for 8 monitor intervals: a paced UDP flow with ACKs,
    its intervals' statistics from real packets, beside the fluid simulator's."""
    import pandas as pd

    from plume.envs.registry import get_env

    # A lateness tolerance of 1 us, below what any real loop achieves (10 us is the
    # histogram's resolution): the run must be marked as fallen behind everywhere it shows.
    # ``++`` adds the key where conf/emulate.yaml does not list it yet.
    done = _emulate(tmp_path, "env=cc", "controller=aimd", "emulation.traces=2",
                    "emulation.parallel=2", "emulation.mis=8",
                    "emulation.lateness_tolerance_ms=0.001")
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = _run_dir(tmp_path)
    lateness = json.loads((run_dir / "status.json").read_text())["link_lateness"]
    assert lateness["within_tolerance"] is False and lateness["tolerance_ms"] == 0.001
    assert sorted(lateness["late_traces"]) == sorted(
        pd.read_parquet(run_dir / "eval.parquet")["trace_id"].unique())
    assert "WARNING: the emulated link fell behind its schedule" in (
        run_dir / "gap.md").read_text()
    assert "fell behind" in done.stdout + done.stderr  # the log line
    frame = pd.read_parquet(run_dir / "eval.parquet")
    assert {m.name for m in get_env("cc").episode_fields} <= set(frame.columns)
    assert sorted(frame["mode"]) == ["emulation"] * 2 + ["simulation"] * 2
    assert (frame["length"] == 8).all()
    steps = pd.read_parquet(run_dir / "steps.parquet")
    emulated = steps[steps["mode"] == "emulation"]
    # Utilisation: packets acknowledged over the MIs / the link's packets in their duration
    # (emulated MIs count a packet queued past its MI's end: a short flow can exceed 1).
    capacity = get_env("cc").load_builtin("aurora", "test").constants["bandwidth"][:2]
    for row in frame.itertuples():
        mis = steps[(steps["mode"] == row.mode) & (steps["trace"] == row.trace)]
        delivered = (mis["receiving_rate_bps"] * mis["duration_s"]).sum() / 12000.0
        expected = delivered / (capacity[row.trace] * mis["duration_s"].sum())
        assert row.utilisation == pytest.approx(expected, rel=1e-9)
    assert (frame.loc[frame["mode"] == "simulation", "utilisation"] <= 1 + 1e-9).all()
    # Real packets: RTTs at least the link's two one-way delays, rates within the clip.
    assert (emulated["latency_s"] > 0).all() and (emulated["loss"].between(0, 1)).all()
    assert emulated["rate_bps"].between(40 * 12000 * 0.999, 1000 * 12000 * 1.001).all()
    gap = pd.read_csv(run_dir / "gap.csv")
    assert list(gap["metric"]) == ["score", "throughput_mbps", "latency", "loss"]
    from plume.report.cli import main as report
    from plume.report.tables import md_escape

    assert report([str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| aimd | cc | plume | score |" in text
    assert "**Warning: the emulated link fell behind its schedule in 1 run(s)**" in text
    assert "- " + md_escape(f"{run_dir} (aimd, cc, link=plume): p99 lateness") in text


# ------------------------------------------------------------------- without root; Mahimahi
NOBODY = (65534, 65534)
"""The unprivileged user and group (nobody, nogroup), with no supplementary groups."""
LEND_FAILED = 97
"""Exit status of the mount script when this machine cannot make a private mount namespace."""


def _nobody_may(path: Path, bits: int) -> bool:
    """Whether nobody has the permission ``bits`` (4 read, 1 search) on ``path``."""
    info = path.stat()
    shift = 6 if info.st_uid == NOBODY[0] else 3 if info.st_gid == NOBODY[1] else 0
    return (info.st_mode >> shift) & bits == bits


def _what_nobody_reads() -> list[Path]:
    """The folders plume-emulate run by this interpreter reads: the interpreter's installation,
    the environment (venv) and its bin, and where plume and Hydra's plugins are imported from."""
    import hydra_plugins
    import plume

    return sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix), Path(sys.prefix).resolve(),
                   Path(sys.executable).parent, Path(os.path.realpath(sys.executable)).parent,
                   Path(plume.__file__).resolve().parent,
                   *(Path(folder).resolve() for folder in hydra_plugins.__path__
                     if os.path.isdir(folder))})  # not the editable install's path hook


def _lend_to_nobody(needed: list[Path], stage: Path) -> tuple[str, str | None]:
    """A shell script for a private mount namespace in which nobody can reach ``needed``, or
    the reason it cannot. Each folder on the way that nobody cannot search gets, in that
    namespace only, a tmpfs of mode 755 over it holding bind mounts of just the entries on the
    way (staged before any tmpfs hides them; an entry nobody cannot search either becomes an
    empty folder with its own tmpfs). No permission of any file or folder changes, and
    nothing outside that namespace."""
    unreadable = [path for path in needed if not _nobody_may(path, 5)]
    if unreadable:
        return "", f"{unreadable[0]} is not readable by nobody"
    blocked = sorted({p for path in needed for p in path.parents if not _nobody_may(p, 1)},
                     key=lambda p: len(p.parts))
    entries = {folder: sorted({Path(*path.parts[:len(folder.parts) + 1]) for path in needed
                               if folder in path.parents}) for folder in blocked}
    staged = {entry: stage / str(i) for i, entry in enumerate(
        e for folder in blocked for e in entries[folder] if e not in blocked)}
    q = shlex.quote
    lines = [f"mkdir {q(str(at))} && mount --bind {q(str(entry))} {q(str(at))}"
             for entry, at in staged.items()]
    for folder in blocked:
        lines.append(f"mount -t tmpfs -o mode=755 plume-nobody {q(str(folder))}")
        lines += [f"mkdir -m 755 {q(str(e))}" + (
            f" && mount --move {q(str(staged[e]))} {q(str(e))}" if e in staged else "")
            for e in entries[folder]]
    return " && ".join(lines), None


def _as_nobody(argv: list[str], stage: Path) -> list[str]:
    """``argv`` run as nobody, in a private mount namespace that lends it what it reads when
    some folder on the way is private (a checkout in ``mktemp -d``, a home of mode 700)."""
    nobody = ["setpriv", f"--reuid={NOBODY[0]}", f"--regid={NOBODY[1]}", "--clear-groups", "--",
              *argv]
    script, reason = _lend_to_nobody(_what_nobody_reads(), stage)
    if reason is not None:
        pytest.skip(f"plume-emulate cannot run as nobody from here: {reason}")
    if not script:
        return nobody
    lend = (f"{{ {script}; }} || {{ echo 'cannot lend folders to nobody' >&2; "
            f"exit {LEND_FAILED}; }}")
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
            f'{lend}; exec "$@"', "sh", *nobody]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="runs plume-emulate as the unprivileged user nobody: needs root and "
                           "setpriv to switch to it")
def test_an_unprivileged_user_emulates_in_a_user_namespace_or_is_told_what_is_needed():
    """As ``nobody``: where the kernel lets an unprivileged user make a user namespace with a
    TUN device, the job completes; elsewhere it is refused in one line naming CAP_NET_ADMIN,
    before any run directory exists. Works from any checkout: what nobody must read but cannot
    reach (a private folder on the way) is lent to it in a private mount namespace."""
    folder = Path(tempfile.mkdtemp(prefix="plume-nobody-"))
    home, root, stage = folder / "home", folder / "runs", folder / "stage"
    try:
        for made in (home, root, stage):
            made.mkdir()
        for made in (folder, home, root):
            made.chmod(0o777)
        done = subprocess.run(
            _as_nobody([*EMULATE, f"paths.root={root}", "env=cc", "controller=aimd",
                        "emulation.traces=1", "emulation.mis=4"], stage),
            capture_output=True, text=True, timeout=300, cwd=home,
            env={**os.environ, "HOME": str(home)})
        if done.returncode == LEND_FAILED:
            pytest.skip(f"no private mount namespace here: {done.stderr.strip()[-300:]}")
        if done.returncode == 0:
            (status,) = root.glob("emulation/*/seed=0/status.json")
            assert json.loads(status.read_text())["state"] == "completed"
        else:
            assert done.returncode == 2, done.stderr[-2000:]
            (line,) = done.stderr.strip().splitlines()
            assert line.startswith("plume-emulate: error: ") and "CAP_NET_ADMIN" in line
            assert "failed to execute" not in line  # the namespace, not a file nobody lacks
            assert os.listdir(root) == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_schedule_written_for_mahimahi_is_the_same_cycle():
    """Mahimahi's period is its last timestamp: the written trace holds every opportunity
    of the cycle, the same period and the same gaps between opportunities (rotated)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.integers(0, 999), min_size=1, max_size=60), st.integers(1000, 1500))
    def check(times, period):
        schedule = Schedule(np.sort(np.array(times, np.int64)), period)
        with tempfile.TemporaryDirectory() as folder:
            back = Schedule.from_mahimahi(schedule.to_mahimahi(Path(folder) / "t"))
        assert back.period_ms == period and len(back.times_ms) == len(times)

        def gaps(s):
            cycle = np.sort(s.times_ms % s.period_ms)
            return sorted(np.diff(np.append(cycle, cycle[0] + s.period_ms)).tolist())

        assert gaps(back) == gaps(schedule)

    check()
    # 12 Mbit/s: one 1500-byte opportunity per millisecond, Mahimahi's "12mbps" trace.
    with tempfile.TemporaryDirectory() as folder:
        text = Schedule.constant(12.0).to_mahimahi(Path(folder) / "t").read_text().split()
    assert text == [str(ms) for ms in range(1, 1001)]


def test_mahimahi_shells_are_nested_as_its_tools_expect():
    """``mm-delay D [mm-loss DIR RATE] mm-link UP DOWN [droptail queues] -- sh -c CMD``, the
    inside reaching the outside through $MAHIMAHI_BASE (expanded inside)."""
    from plume.emulation.mahimahi import BASE, shell_argv

    up = LinkSpec(Schedule.constant(12.0), 40.0)
    down = LinkSpec(Schedule.constant(6.0), 40.0, queue_packets=64, loss=0.01)
    argv = shell_argv(up, down, "/t/up", "/t/down", ["python3", "-m", "x", BASE, "8000"])
    assert argv == ["mm-delay", "40", "mm-loss", "downlink", "0.01", "mm-link", "/t/up",
                    "/t/down", "--downlink-queue=droptail", "--downlink-queue-args=packets=64",
                    "--", "sh", "-c", 'exec python3 -m x "$MAHIMAHI_BASE" 8000']
    with pytest.raises(ValueError, match="one whole number of milliseconds"):
        shell_argv(up, LinkSpec(Schedule.constant(6.0), 20.0), "u", "d", ["true"])


@pytest.mark.skipif(REASON is not None or not shutil.which("mm-link"),
                    reason=str(REASON or "Mahimahi (mm-delay, mm-link) is not installed"))
def test_mahimahi_carries_tcp_at_the_payload_capacity_as_plumes_link_does():
    """The cross-check: 5 s of TCP through Mahimahi's own shells (the client inside) at
    12 Mbit/s, within 3 % of the payload capacity, as the calibration asks of Plume's link."""
    from plume.emulation.mahimahi import MahimahiShell

    measured, expected, _ = _goodput(5.0, lambda down, up: MahimahiShell(down, up, "client"))
    assert abs(measured / expected - 1.0) <= 0.03, (measured, expected)
