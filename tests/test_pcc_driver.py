"""The PCC helper module driven exactly as PCC-Uspace's sender drives it.

:class:`PccSender` follows ``src/pcc/rate_control/pcc_python_rc.cpp`` (PCC-Uspace, commit
42751d7), not the adapter's code: it appends ``-pypath`` to ``sys.path`` and imports the
``-pyhelper`` module by name; flow ids are Python ints from a counter starting at 0; after each
monitor interval (MI) it calls ``give_sample`` with the byte counts and the average packet size
as ints (``PyLong_FromLong`` of C ``int``s), the four times as floats (microseconds minus the
flow's first MI's send start, over ``USEC_PER_SEC``; an MI without ACKs has ack time 0, and
the unsigned subtraction wraps), the first and last ACK latency through ``PyLong_FromLong``
(truncated to whole seconds: ints) and the utility as a float. An exception from
``give_sample`` is never cleared by PCC, so the next ``get_rate`` fails and the sender exits
with status 255: the driver fails there. ``get_rate`` must return a float (``PyFloat_Check``).

The intervals are a simulated flow's (latency, rates, loss per MI, in whole bytes and
microseconds) with degenerate ones among them: one packet (send end == start), no bytes, no
ACKs, RTTs of whole seconds, ACK times before the send times. Also here: PCC's
``give_sample`` arguments fuzzed with any Python values, and the start-rate checks of
``plume-serve pcc`` and ``write_module``; and (slow, needs gcc) a C sender built as the README
says, embedding this environment's Python.
"""

from __future__ import annotations

import importlib
import math
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plume.deploy import serve
from plume.deploy.adapters import pcc
from plume.deploy.replay import simulated_sessions
from plume.deploy.runtime import load_controller
from tests.test_deploy_adapters import make_cc_export

ROOT = Path(__file__).resolve().parents[1]
USEC_PER_SEC = 1_000_000
UINT64 = 2**64
FLOW_START_US = 1_765_000_000_000_000
"""The first MI's send start on PCC's clock (microseconds since the epoch)."""


@pytest.fixture(scope="module")
def cc_export(tmp_path_factory):
    """A learned CC export (ONNX) whose rate moves with latency and the send ratio."""
    return make_cc_export(tmp_path_factory.mktemp("pcc") / "cc")


class SenderExit(AssertionError):
    """Where PCC-Uspace's sender would call ``exit(-1)`` (status 255)."""


class PccSender:
    """The calls of one ``PccPythonRateController`` (one flow), as pcc_python_rc.cpp makes
    them."""

    next_id = 0

    def __init__(self, pypath: str, helper: str) -> None:
        if pypath not in sys.path:
            sys.path.append(pypath)  # PyRun_SimpleString("sys.path.append(...)")
        self.module = importlib.import_module(helper)  # PyImport_ImportModule
        for name in ("init", "give_sample", "get_rate", "reset"):
            if not hasattr(self.module, name):
                raise SenderExit(f"Could not load python function: {name}")
        self.id, PccSender.next_id = PccSender.next_id, PccSender.next_id + 1
        self.offset_us: int | None = None
        self.error_set = False
        self.printed: list[str] = []
        self._call(self.module.init, self.id)  # PyErr_Print: shown, cleared

    def _call(self, func, *args) -> object:
        try:
            return func(*args)
        except Exception as e:  # noqa: BLE001 (PyErr_Print: shows any exception, clears it)
            self.printed.append(f"{type(e).__name__}: {e}")
            return None

    def monitor_interval_finished(self, mi: dict) -> None:
        """GiveSample of one MI: ``mi`` holds the MonitorInterval's getters (us, ints)."""
        if self.offset_us is None:
            self.offset_us = mi["send_start_us"]

        def seconds(t_us: int) -> float:  # uint64 arithmetic, then / (double)USEC_PER_SEC
            return ((t_us - self.offset_us) % UINT64) / float(USEC_PER_SEC)

        args = (self.id, int(mi["bytes_sent"]), int(mi["bytes_acked"]), int(mi["bytes_lost"]),
                seconds(mi["send_start_us"]), seconds(mi["send_end_us"]),
                seconds(mi["recv_start_us"]), seconds(mi["recv_end_us"]),
                [int(mi["first_ack_latency_us"] / USEC_PER_SEC),  # PyLong_FromLong(double)
                 int(mi["last_ack_latency_us"] / USEC_PER_SEC)],
                int(mi["bytes_sent"] // max(mi["packets"], 1)), float(mi.get("utility", 0.0)))
        try:
            self.module.give_sample(*args)  # the result unchecked, the error never cleared
        except Exception as e:  # noqa: BLE001 (any exception stays set in PCC)
            self.error_set = True
            self.printed.append(f"{type(e).__name__}: {e}")

    def get_rate(self) -> float:
        """GetNextSendingRate."""
        if self.error_set:
            raise SenderExit(f"ERROR: Failed to call python get_rate() func (an exception of "
                             f"give_sample was left set: {self.printed[-1]})")
        try:
            result = self.module.get_rate(self.id)
        except Exception as e:  # noqa: BLE001 (result NULL: PCC exits)
            raise SenderExit(f"ERROR: Failed to call python get_rate() func: {e}") from None
        if not isinstance(result, float):  # PyFloat_Check
            raise SenderExit(f"ERROR: Output from python get_rate() is not a float: {result!r}")
        return float(result)

    def reset(self) -> None:
        self._call(self.module.reset, self.id)


def _interval(k: int, t_us: int, m: dict, packet_bytes: int = 1500) -> dict:
    """A simulated MI's statistics as PCC's MonitorInterval getters: whole bytes and
    microseconds; the first and last ACK latency spread around the mean by the inflation."""
    duration_us = round(m["duration_s"] * USEC_PER_SEC)
    sent = round(m["sending_rate_bps"] / 8 * m["duration_s"])
    spread = m["latency_inflation"] * m["duration_s"] / 2.0
    first, last = (round((m["latency_s"] - spread) * USEC_PER_SEC),
                   round((m["latency_s"] + spread) * USEC_PER_SEC))
    return {"bytes_sent": sent, "bytes_acked": round(m["receiving_rate_bps"] / 8 *
                                                     m["duration_s"]),
            "bytes_lost": round(m["loss"] * sent), "packets": max(sent // packet_bytes, 1),
            "send_start_us": t_us, "send_end_us": t_us + duration_us,
            "recv_start_us": t_us + first, "recv_end_us": t_us + duration_us + last,
            "first_ack_latency_us": first, "last_ack_latency_us": last, "utility": 0.5 * k}


def _degenerate(t_us: int, kind: str) -> dict:
    """MIs PCC does produce: one packet, nothing sent, nothing acknowledged (ack times 0),
    whole-second RTTs, ACK times before the send times."""
    mi = {"bytes_sent": 1500, "bytes_acked": 1500, "bytes_lost": 0, "packets": 1,
          "send_start_us": t_us, "send_end_us": t_us + 100_000, "recv_start_us": t_us + 40_000,
          "recv_end_us": t_us + 140_000, "first_ack_latency_us": 40_000,
          "last_ack_latency_us": 40_000}
    if kind == "one packet":
        mi["send_end_us"] = t_us
    elif kind == "no bytes":
        mi.update(bytes_sent=0, bytes_acked=0, packets=0)
    elif kind == "no acks":
        mi.update(bytes_acked=0, bytes_lost=1500, recv_start_us=0, recv_end_us=0,
                  first_ack_latency_us=0, last_ack_latency_us=0)
    elif kind == "whole seconds":
        mi.update(recv_start_us=t_us + 1_500_000, recv_end_us=t_us + 1_620_000,
                  first_ack_latency_us=1_500_000, last_ack_latency_us=1_520_000)
    elif kind == "acks before sends":
        mi.update(recv_start_us=t_us - 5, recv_end_us=t_us - 5)
    return mi


DEGENERATE = ("one packet", "no bytes", "no acks", "whole seconds", "acks before sends")


def _written(cc_export, tmp_path, name: str, **kw) -> str:
    return str(pcc.write_module(str(cc_export), str(tmp_path), name, **kw).parent)


def test_pcc_as_built_gets_finite_rates_on_every_interval(cc_export, tmp_path):
    """Two flows of 399 simulated MIs each, degenerate MIs among them, RTTs as ints: a float
    within the clip after every interval, no exception, and the clean flow's rates track the
    simulator's own decisions though PCC passed no usable RTT."""
    sessions = simulated_sessions(cc_export, n=2)
    start = sessions[0].reset_kwargs["initial_rate_bps"]
    pypath = _written(cc_export, tmp_path, "plume_driver_helper", initial_rate_bps=start)
    clean, mixed = PccSender(pypath, "plume_driver_helper"), PccSender(pypath,
                                                                       "plume_driver_helper")
    low, high = pcc.AuroraFlows(str(cc_export)).active_clip_bps
    rates = {clean.id: [clean.get_rate()], mixed.id: [mixed.get_rate()]}
    t_us = {clean.id: FLOW_START_US, mixed.id: FLOW_START_US + 17}
    intervals, kept = 0, {kind: [] for kind in DEGENERATE}
    for k, (a, b) in enumerate(zip(sessions[0].steps[1:], sessions[1].steps[1:]), 1):
        for sender, m in ((clean, a.measurement), (mixed, b.measurement)):
            mi = _interval(k, t_us[sender.id], m)
            t_us[sender.id] = mi["send_end_us"]
            sender.monitor_interval_finished(mi)
            rates[sender.id].append(sender.get_rate())
            intervals += 1
        if k % 20 == 0:  # a degenerate MI on the mixed flow
            kind, before = DEGENERATE[k // 20 % len(DEGENERATE)], mixed.get_rate()
            mi = _degenerate(t_us[mixed.id], kind)
            t_us[mixed.id] = max(mi["send_end_us"], t_us[mixed.id])
            mixed.monitor_interval_finished(mi)
            rates[mixed.id].append(mixed.get_rate())
            kept[kind].append(rates[mixed.id][-1] == before)
            intervals += 1
        if k == 200:  # PCC's Reset: the flow starts over, at its first decision again
            mixed.reset()
            assert mixed.get_rate() == rates[mixed.id][0]
    assert intervals >= 2 * 398 + 19 and not clean.printed and not mixed.printed
    for flow_rates in rates.values():
        assert all(type(r) is float and math.isfinite(r) and low <= r <= high
                   for r in flow_rates)
    assert kept["one packet"] == [True] * 3  # not usable: the rate kept exactly
    assert sum(len(v) for v in kept.values()) == 19
    simulated = [step.action for step in sessions[0].steps]
    worst = max(abs(r / s - 1.0) for r, s in zip(rates[clean.id], simulated))
    print(f"\n[pcc] {intervals} intervals; clean flow vs the simulator: worst relative rate "
          f"difference {worst:.2e}")
    assert worst < 1e-3, worst  # whole bytes and microseconds only: no RTT from PCC at all
    assert len(set(rates[clean.id])) > 100  # the rate moves


def test_pcc_zero_rtts_from_the_first_interval_give_the_ack_times_latency(cc_export,
                                                                          tmp_path):
    """The reported failure: RTTs [0, 0] from the first MI on gave NaN (0/0 in the latency
    ratio). Now each rate is the runtime's for the MI's statistics with the latency its ACK
    times carry (40 ms; 1,500 bytes over 100 ms, nothing lost)."""
    pypath = _written(cc_export, tmp_path, "plume_zero_rtt", initial_rate_bps=6e6)
    sender = PccSender(pypath, "plume_zero_rtt")
    ref = load_controller(cc_export)
    ref.reset(initial_rate_bps=6e6)
    assert sender.get_rate() == ref.decide(None)
    stats = {"sending_rate_bps": 120_000.0, "receiving_rate_bps": 120_000.0, "latency_s": 0.04,
             "latency_inflation": 0.0, "loss": 0.0, "duration_s": 0.1}
    t = FLOW_START_US
    for k in range(30):
        mi = _degenerate(t, "clean")
        sender.monitor_interval_finished(mi)
        assert sender.get_rate() == pytest.approx(ref.decide(stats), rel=1e-9), k
        t = mi["send_end_us"]
    assert not sender.printed


_ANY = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**300, max_value=10**400),
    st.floats(), st.text(max_size=5), st.binary(max_size=5),
    st.lists(st.one_of(st.integers(), st.floats(), st.none(), st.text(max_size=3)), max_size=3))
"""Any argument PCC (or a fork of it) might pass: NaN, infinities, huge ints, wrong types."""


@pytest.fixture(scope="module")
def flows(cc_export):
    """One helper across fuzz examples: the flows they leave are any flows' state."""
    return pcc.AuroraFlows(str(cc_export))


@settings(max_examples=60, deadline=None)
@given(st.lists(_ANY, min_size=11, max_size=11), st.booleans())
def test_pcc_give_sample_takes_any_arguments(flows, args, known_flow):
    """give_sample with any 11 values never raises; get_rate then is a finite float in the
    clip (for the flow given, known or not, and for flow 0)."""
    low, high = flows.active_clip_bps
    if known_flow:
        args[0] = 0
    flows.init(0)
    assert flows.give_sample(*args) is None
    assert flows.reset(args[0]) is None and flows.init(args[0]) is None
    for flow_id in (args[0], 0):
        rate = flows.get_rate(flow_id)
        assert type(rate) is float and math.isfinite(rate) and low <= rate <= high


@pytest.mark.parametrize("mbps", ["-3", "0", "nan", "inf", "1e308"])
def test_plume_serve_pcc_refuses_bad_start_rates_before_writing(cc_export, tmp_path, capsys,
                                                                mbps):
    out = tmp_path / "helper"
    code = serve.main(["pcc", str(cc_export), "--write-module", str(out),
                       "--initial-rate-mbps", mbps])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and not out.exists()
    assert err.startswith("plume-serve pcc: error: --initial-rate-mbps must be a finite "
                          "number > 0, got ")


def test_plume_serve_pcc_command_refuses_a_negative_rate(cc_export, tmp_path):
    out = tmp_path / "helper"
    done = subprocess.run([sys.executable, "-m", "plume.deploy.serve", "pcc", str(cc_export),
                           "--write-module", str(out), "--initial-rate-mbps", "-3"],
                          check=False, capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode == 2 and not out.exists()
    assert done.stderr == ("plume-serve pcc: error: --initial-rate-mbps must be a finite number "
                           "> 0, got -3\n")


@pytest.mark.parametrize("rate", [-3e6, 0, float("nan"), float("inf"), True, "6e6"])
def test_write_module_refuses_bad_start_rates_before_writing(cc_export, tmp_path, rate):
    with pytest.raises(ValueError, match="initial rate must be a finite number of bit/s > 0"):
        pcc.write_module(str(cc_export), str(tmp_path / "out"), initial_rate_bps=rate)
    assert not (tmp_path / "out").exists()


def test_written_module_refuses_another_python(cc_export, tmp_path):
    """The embedding interpreter must be this environment's Python: the module says so in
    one line instead of failing inside numpy's import."""
    path = pcc.write_module(str(cc_export), str(tmp_path), "plume_other_python")
    text = path.read_text()
    mine = "({}, {})".format(*sys.version_info[:2])
    assert f"_PYTHON = {mine}" in text
    path.write_text(text.replace(f"_PYTHON = {mine}", "_PYTHON = (3, 6)"))
    done = subprocess.run([sys.executable, "-c", "import plume_other_python"], check=False,
                          capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert done.returncode == 1
    assert ("ImportError: plume_other_python: written for Python 3.6" in done.stderr
            and "rebuild PCC-Uspace against Python 3.6" in done.stderr)


EMBED_C = r"""
#include <Python.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
/* An embedding sender with PCC-Uspace's argument types: argv = pypath helper n. */
static PyObject *get(PyObject *m, const char *name) {
    PyObject *f = PyObject_GetAttrString(m, name);
    if (f == NULL) { PyErr_Print(); exit(-1); }
    return f;
}
int main(int argc, char **argv) {
    Py_Initialize();
    PyList_Append(PySys_GetObject("path"), PyUnicode_FromString(argv[1]));
    PyObject *m = PyImport_ImportModule(argv[2]);
    if (m == NULL) { PyErr_Print(); exit(-1); }
    PyObject *init = get(m, "init"), *give = get(m, "give_sample"), *rate = get(m, "get_rate");
    PyObject *id = PyTuple_New(1);
    PyTuple_SetItem(id, 0, PyLong_FromLong(0));
    PyObject_CallObject(init, id);
    PyErr_Print();
    for (int k = 0; k < atoi(argv[3]); ++k) {
        double t0 = 0.1 * k, t1 = k % 13 == 12 ? t0 : t0 + 0.1, rtt = 0.04 + 1e-4 * (k % 7);
        long sent = k % 10 == 9 ? 0 : 15000;
        PyObject *a = PyTuple_New(11), *rtts = PyList_New(2);
        PyList_SetItem(rtts, 0, PyLong_FromLong(rtt));
        PyList_SetItem(rtts, 1, PyLong_FromLong(rtt));
        PyTuple_SetItem(a, 0, PyLong_FromLong(0));
        PyTuple_SetItem(a, 1, PyLong_FromLong(sent));
        PyTuple_SetItem(a, 2, PyLong_FromLong(sent - sent / 30));
        PyTuple_SetItem(a, 3, PyLong_FromLong(sent / 30));
        PyTuple_SetItem(a, 4, PyFloat_FromDouble(t0));
        PyTuple_SetItem(a, 5, PyFloat_FromDouble(t1));
        PyTuple_SetItem(a, 6, PyFloat_FromDouble(t0 + rtt));
        PyTuple_SetItem(a, 7, PyFloat_FromDouble(t1 + rtt));
        PyTuple_SetItem(a, 8, rtts);
        PyTuple_SetItem(a, 9, PyLong_FromLong(1500));
        PyTuple_SetItem(a, 10, PyFloat_FromDouble(0.0));
        PyObject_CallObject(give, a);  /* the result unchecked, an error never cleared */
        PyObject *r = PyObject_CallObject(rate, id);
        if (r == NULL) { printf("get_rate failed at %d\n", k); PyErr_Print(); exit(-1); }
        double v = PyFloat_AsDouble(r);
        if (!PyFloat_Check(r) || !isfinite(v) || v <= 0) { printf("bad rate at %d\n", k); exit(-1); }
    }
    printf("ok %s intervals\n", argv[3]);
    return 0;
}
"""


@pytest.mark.slow
def test_pcc_helper_in_a_sender_built_against_this_python(cc_export, tmp_path):
    """The README's rebuild, checked: a C sender compiled with this environment's base
    ``python3.X-config --includes`` / ``--ldflags --embed`` embeds Python, imports the written
    helper and drives 230 intervals (whole-second RTTs, one-packet and empty MIs among them)
    with the environment's bin first on PATH and nothing else set."""
    config = Path(sys.base_prefix) / "bin" / "python{}.{}-config".format(*sys.version_info[:2])
    if shutil.which("gcc") is None or not config.exists() or not sysconfig.get_config_var(
            "Py_ENABLE_SHARED"):
        pytest.skip("needs gcc and a shared libpython with its python3.X-config")
    flags = [subprocess.run([str(config), *opt], check=True, capture_output=True, text=True,
                            timeout=30).stdout.split() for opt in (["--includes"],
                                                                     ["--ldflags", "--embed"])]
    (tmp_path / "sender.c").write_text(EMBED_C)
    subprocess.run(["gcc", "sender.c", "-o", "sender", *flags[0], *flags[1]], check=True,
                   cwd=tmp_path, timeout=120)
    pypath = _written(cc_export, tmp_path / "helper", "plume_embedded", profile="pcc")
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin",
           "HOME": str(tmp_path)}
    done = subprocess.run(["./sender", pypath, "plume_embedded", "230"], check=False,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok 230 intervals", (
        done.stdout + done.stderr)
