"""The trace-driven link emulator, calibrated with real kernel traffic between two network
namespaces: idle RTT, droptail drops, TCP goodput on a constant link, delivered bytes following
a stepping trace; the host's interfaces and routes untouched; nothing left after a SIGKILL.

Every test needs CAP_NET_ADMIN and /dev/net/tun (root on CI); elsewhere they skip with the
reason. Unit tests of the link's queue arithmetic need neither."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time

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
@needs_namespaces
def test_idle_rtt_is_twice_the_one_way_delay():
    link = LinkSpec(Schedule.constant(12), delay_ms=20)
    with Emulator(link, link) as emu:
        _start(emu, "server", "udp-echo", "9000", "10")
        rtts = _probe(emu, "client", "udp-ping", emu.address("server"), "9000", "40", "0.02")
    assert len(rtts["rtt_s"]) == 40
    assert abs(statistics.median(rtts["rtt_s"]) * 1000 - 40.0) <= 2.0


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


def _goodput(seconds: float) -> tuple[float, float]:
    """(measured, expected) TCP goodput in bit/s on a constant 12 Mbit/s link (5 ms each
    way), counted after the first second (slow start)."""
    link = LinkSpec(Schedule.constant(12), delay_ms=5)
    with Emulator(link, link) as emu:
        _start(emu, "server", "tcp-source", "9001", str(seconds + 2))
        sink = _probe(emu, "client", "tcp-sink", emu.address("server"), "9001", str(seconds),
                      timeout=seconds + 30)
    per_second = sink["per_second"][1:int(seconds)]
    measured = 8.0 * sum(per_second) / len(per_second)
    # Payload per 1500-byte packet: less 20 bytes of IP header and 32 of TCP header with
    # timestamps (Linux's default), i.e. the connection's MSS of 1448.
    return measured, 12e6 * (1500 - 20 - 32) / 1500


@needs_namespaces
def test_tcp_goodput_on_a_constant_link_is_its_payload_capacity():
    measured, expected = _goodput(5.0)
    assert abs(measured / expected - 1.0) <= 0.03, (measured, expected)


@needs_namespaces
@pytest.mark.slow
def test_thirty_seconds_of_tcp_goodput_is_the_payload_capacity():
    measured, expected = _goodput(30.0)
    assert abs(measured / expected - 1.0) <= 0.03, (measured, expected)


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
    np.testing.assert_allclose(delivered, np.array([8e6, 2e6, 4e6, 8e6]) / 8, rtol=0.05)
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


# ------------------------------------------------------------------- ABR over real TCP
@needs_namespaces
def test_abr_sessions_over_real_tcp_write_the_gap_against_the_simulator(tmp_path):
    """Two Pensieve-setting traces, 2 chunks each, BBA: both modes on the same traces, the
    per-chunk records and the gap table; the emulated chunks took real time."""
    import pandas as pd

    from plume.emulation.job import main

    started = time.monotonic()
    main(["abr", "--controller", "bba", "--traces", "2", "--parallel", "2", "--chunks", "2",
          "--out", str(tmp_path)])
    frame = pd.read_parquet(tmp_path / "emulation.parquet")
    assert sorted(frame["mode"]) == ["emulation"] * 2 + ["simulation"] * 2
    assert (frame["length"] == 2).all() and (frame["video_seconds"] == 8.0).all()
    chunks = pd.read_parquet(tmp_path / "steps.parquet")
    emulated = chunks[chunks["mode"] == "emulation"]
    # Every emulated download took at least the link's round trip (2 x 40 ms).
    assert (emulated["delay"] >= 0.08).all()
    # ... and happened in real time (the two sessions ran side by side).
    assert emulated.groupby("trace")["delay"].sum().max() <= time.monotonic() - started
    gap = pd.read_csv(tmp_path / "gap.csv")
    assert list(gap["metric"]) == ["qoe_per_chunk", "mean_level", "stall", "throughput_mbps"]
    assert gap["gap_lo"].isna().all()  # 2 traces: no interval
    assert "| qoe_per_chunk |" in (tmp_path / "gap.md").read_text()
    # plume-report shows both modes and the gap, recomputed from the folder's table.
    from plume.report.cli import main as report

    assert report([str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Simulation and emulation (plume-emulate)" in text and "| bba | abr |" in text
    table = pd.read_csv(tmp_path / "report" / "tables" / "emulation_gap.csv")
    np.testing.assert_allclose(table["gap"], gap["gap"])


@needs_namespaces
def test_cc_flows_over_real_udp_write_the_gap_against_the_fluid_model(tmp_path):
    """AIMD on two Aurora test links for 8 monitor intervals: a paced UDP flow with ACKs,
    its intervals' statistics from real packets, beside the fluid simulator's."""
    import pandas as pd

    from plume.emulation.job import main

    main(["cc", "--controller", "aimd", "--traces", "2", "--parallel", "2", "--mis", "8",
          "--out", str(tmp_path)])
    frame = pd.read_parquet(tmp_path / "emulation.parquet")
    assert sorted(frame["mode"]) == ["emulation"] * 2 + ["simulation"] * 2
    assert (frame["length"] == 8).all()
    steps = pd.read_parquet(tmp_path / "steps.parquet")
    emulated = steps[steps["mode"] == "emulation"]
    # Real packets: RTTs at least the link's two one-way delays, rates within the clip.
    assert (emulated["latency_s"] > 0).all() and (emulated["loss"].between(0, 1)).all()
    assert emulated["rate_bps"].between(40 * 12000 * 0.999, 1000 * 12000 * 1.001).all()
    gap = pd.read_csv(tmp_path / "gap.csv")
    assert list(gap["metric"]) == ["score", "throughput_mbps", "latency", "loss"]
    from plume.report.cli import main as report

    assert report([str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    assert "| aimd | cc | score |" in (tmp_path / "report" / "report.md").read_text()
