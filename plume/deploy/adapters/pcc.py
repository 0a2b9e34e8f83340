"""PCC-Uspace's Python rate-control helper backed by a Plume Aurora export.

PCC-Uspace's sender (``src/pcc/rate_control/pcc_python_rc.cpp``, commit 42751d7) embeds
Python, appends ``-pypath=`` to ``sys.path``, imports the module named by ``-pyhelper=`` and
calls, per flow:

* ``init(flow_id)`` when the flow's controller is built; ``flow_id`` is a Python int
  (``PyLong_FromLong`` of a counter from 0). An exception here is printed and cleared
  (``PyErr_Print``); the sender goes on;
* ``give_sample(flow_id, bytes_sent, bytes_acked, bytes_lost, send_start_time, send_end_time,
  recv_start_time, recv_end_time, rtt_samples, packet_size, utility)`` once per finished
  monitor interval (MI), with types and units as PCC builds them: the byte counts and
  ``packet_size`` (the MI's average) are ints (``PyLong_FromLong`` of C ``int``s); the four
  times are floats, **seconds** since the flow's first MI started (microseconds minus that
  offset, over ``USEC_PER_SEC``): the send times of the MI's first and last packet, and the
  arrival of the first and of the last ACK (or loss report) for its packets (the
  MonitorInterval's ``first_packet_ack_time`` / ``last_packet_ack_time``, 0 while none came:
  the unsigned subtraction then wraps); ``rtt_samples`` is a list of two ints, the first and
  last ACK latency in seconds passed through ``PyLong_FromLong``, i.e. **truncated to whole
  seconds** (0 for any RTT under 1 s); ``utility`` (PCC's own) is a float and is ignored.
  PCC neither checks the call's result nor clears an exception it raises, so the next
  ``get_rate`` call fails and the sender exits with status 255;
* ``get_rate(flow_id)``: the sending rate in bit/s; anything but a Python float
  (``PyFloat_Check``), or an exception, makes the sender exit;
* ``reset(flow_id)``: start the flow over (older PCC-Uspace versions call ``reset()`` with no
  argument: every flow).

So this module never lets an exception reach PCC: a call it cannot use (a malformed MI, a
flow PCC never initialised, a failure of the controller itself) is logged (the first
:data:`LOGGED_ERRORS` per flow, then counted) and the flow keeps its last good rate; an
unknown flow is started as ``init`` would. ``get_rate`` always returns a finite Python float
within the active clip.

Latency. Whole-second RTTs carry nothing at the latencies Aurora acts on (0/0 in the latency
ratio made every rate NaN). What PCC passes correctly are the four times, floats with
microsecond resolution: ``recv_start_time - send_start_time`` is about the first packet's
ACK latency and ``recv_end_time - send_end_time`` the last packet's (each including the
receiver's ACK delay), the two samples PCC meant to pass. When the RTT samples are ints,
these two are the interval's RTT samples (mean latency, and inflation = (last - first) / send
duration, as the runtime computes them); when a PCC passes floats, those are used. Measured
(``tests/test_pcc_driver.py``): a simulated flow of 398 MIs sent as PCC-Uspace sends them
(whole bytes, microseconds, int RTTs) gets rates within 6e-5 of the simulator's decisions.
A sample outside (0, :data:`MAX_RTT_S`] (no ACK: PCC's unsigned subtraction then gives
~1.8e13 s) is dropped; an MI without any is given the flow's last latency, or, before any,
is not used.
Taking the latency from the times is logged once per helper.

Each usable MI is one ``ctrl.decide`` (one monitor interval, as in the simulator), and
``get_rate`` returns the latest decision however often it is called. (PCC-RL's
``loaded_client.py`` instead acts again on every ``get_rate`` call.) The MI's rates are its
bytes over the send duration, as the simulator measures them. Not used (rate kept): an MI
whose send duration is under :data:`MIN_DURATION_S` (one packet: send end == start), whose
counts are not numbers in [0, :data:`MAX_BYTES`], or whose times are not finite.

A flow starts at ``initial_rate_bps`` (PCC-RL's 6 Mbit/s unless told; PCC passes none): a
finite number > 0 (anything else is refused in one line where it is given, before any file
is written), clipped by the active clip; ``init`` / ``reset`` make the first decision on the
empty history, as the simulator's first step does.

Rate clip profiles: ``"contract"`` (default) clips the rate to the export's training clip
(``contract["action"]["clip_bps"]``); ``"pcc"`` uses PCC-RL's deployment clip, [0.5, 300]
Mbit/s (the contract's ``action.pcc_rl_deployment``, else :data:`PCC_PROFILE`, from
``loaded_client.py``). A policy never saw rates outside its training clip, so the contract
profile is the faithful one; the PCC profile reproduces PCC-RL's setup.

:meth:`AuroraFlows.sample` is the strict form of ``give_sample`` for Python callers: it
raises ``MeasurementError`` (one line naming the flow and field) instead of logging.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plume.deploy.adapters.text import show as _show
from plume.deploy.runtime import MeasurementError, load_controller

__all__ = [
    "EXPORT_ENV", "LOGGED_ERRORS", "MAX_BYTES", "MAX_RTT_S", "MIN_DURATION_S", "PCC_PROFILE",
    "PROFILES", "TIME_UNIT_S", "AuroraFlows", "bind", "bound", "check_rate", "get_rate",
    "give_sample", "init", "pcc_rl_deployment", "reset", "unbind", "write_module",
]

log = logging.getLogger("plume.deploy.pcc")

TIME_UNIT_S = 1.0
"""Seconds per unit of the times and RTT samples PCC passes (PCC-Uspace: seconds)."""
PCC_PROFILE = {"clip_bps": (0.5e6, 300e6), "initial_rate_bps": 6e6}
"""PCC-RL's deployment (``loaded_client.py``): MIN_RATE 0.5, MAX_RATE 300, RESET_RATE 6
Mbit/s; a contract's ``action.pcc_rl_deployment`` takes precedence."""
PROFILES = ("contract", "pcc")
EXPORT_ENV, PROFILE_ENV = "PLUME_PCC_EXPORT", "PLUME_PCC_PROFILE"
"""Environment variables that bind the module-level functions on first use."""
MAX_RTT_S = 60.0
"""Longest RTT sample believed: beyond any a sender survives, well below the ~1.8e13 s that
PCC's unsigned ``recv - offset`` gives for an MI without ACKs."""
MIN_DURATION_S = 1e-6
"""Shortest usable send duration: PCC's clock resolution (microseconds)."""
MAX_BYTES = 2**31 - 1
"""Largest byte count PCC can pass (a C ``int``); beyond it a rate would overflow."""
LOGGED_ERRORS = 5
"""Unusable calls logged per flow; later ones are counted (and the count logged at reset)."""


def check_rate(value: Any, what: str = "initial rate") -> float:
    """``value`` as a finite rate > 0 (bit/s), or ValueError in one line."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and isinstance(value, int):
        ok = 0 < value <= sys.float_info.max
    if not ok or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a finite number of bit/s > 0, got {_show(value)}")
    return float(value)


def _finite(value: Any, name: str, flow_id: Any, low: float | None = None,
            high: float | None = None) -> float:
    """A finite number (int or float, in [low, high] when given), or MeasurementError."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and isinstance(value, int):
        ok = abs(value) <= sys.float_info.max  # compared exactly, never converted
    ok = ok and math.isfinite(value)
    if ok and ((low is not None and value < low) or (high is not None and value > high)):
        ok = False
    if not ok:
        bounds = "" if low is None else f" in [{low:g}, {high:g}]"
        raise MeasurementError(f"flow {_show(flow_id)}: {name} must be a finite number"
                               f"{bounds}, got {_show(value)}")
    return float(value)


@dataclass
class _Flow:
    ctrl: Any
    rate: float = 0.0
    samples: int = 0
    errors: int = 0
    latency: float | None = None
    last_error: str | None = None


class AuroraFlows:
    """PCC's four helper functions as methods, one controller session per flow id; none of
    them raises (see the module docstring)."""

    def __init__(self, export_dir: str, profile: str = "contract",
                 initial_rate_bps: float | None = None) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown rate profile {profile!r}: use one of {PROFILES}")
        self.export_dir, self.profile = str(export_dir), profile
        first = load_controller(self.export_dir)  # fail at load time, not at the first flow
        if "pcc" not in first.protocols:
            raise ValueError(f"{self.export_dir}: PCC's helper needs an export whose session "
                             f"speaks PCC's protocol (Deployment.protocols), got {first.env}")
        self.contract = first.contract
        pcc_rl = pcc_rl_deployment(self.contract)
        self.clip_bps = pcc_rl["clip_bps"] if profile == "pcc" else None
        """The rate clip when not the contract's training clip (bit/s)."""
        self.initial_rate_bps = check_rate(pcc_rl["initial_rate_bps"] if initial_rate_bps
                                           is None else initial_rate_bps)
        if self.clip_bps is not None:
            first = self._load()
        self.active_clip_bps = tuple(float(c) for c in first.session.clip_bps)
        """The clip every rate ``get_rate`` returns lies in (bit/s)."""
        low, high = self.active_clip_bps
        self.fallback_rate_bps = min(max(self.initial_rate_bps, low), high)
        """The rate of a flow that cannot be started (its controller failed): the start rate."""
        self._spare = [first]
        self._flows: dict[Any, _Flow] = {}
        self._lock = threading.Lock()
        self._logged_once: set[str] = set()

    def _load(self) -> Any:
        return load_controller(self.export_dir, clip_bps=self.clip_bps)

    def init(self, flow_id: Any) -> None:
        """A new flow (an id seen before starts over)."""
        try:
            self._init(flow_id)
        except Exception as e:  # noqa: BLE001 (never reaches PCC: logged, start rate used)
            self._once(f"init {_show(flow_id)}", f"pcc flow {_show(flow_id)}: init failed "
                       f"({type(e).__name__}: {_show(str(e))}); get_rate answers "
                       f"{self.fallback_rate_bps:g} bit/s")

    def _init(self, flow_id: Any) -> _Flow:
        with self._lock:
            flow = self._flows.get(flow_id)
            if flow is None:
                flow = _Flow(ctrl=self._spare.pop() if self._spare else self._load())
                self._flows[flow_id] = flow
        self._start(flow_id, flow)
        return flow

    def give_sample(self, flow_id: Any, bytes_sent: Any, bytes_acked: Any, bytes_lost: Any,
                    send_start_time: Any, send_end_time: Any, recv_start_time: Any,
                    recv_end_time: Any, rtt_samples: Any, packet_size: Any = None,
                    utility: Any = 0.0) -> None:
        """One finished monitor interval: the flow's next rate is decided now. Never raises:
        an interval that cannot be used is logged and the flow keeps its rate."""
        try:
            self.sample(flow_id, bytes_sent, bytes_acked, bytes_lost, send_start_time,
                        send_end_time, recv_start_time, recv_end_time, rtt_samples)
        except Exception as e:  # noqa: BLE001 (an exception left to PCC kills the sender)
            self._failed(flow_id, e)

    def sample(self, flow_id: Any, bytes_sent: Any, bytes_acked: Any, bytes_lost: Any,
               send_start_time: Any, send_end_time: Any, recv_start_time: Any,
               recv_end_time: Any, rtt_samples: Any, *_ignored: Any) -> float:
        """The strict ``give_sample``: the flow's new rate, or MeasurementError naming the
        flow and field (the flow's state then unchanged)."""
        flow = self._known(flow_id)
        start = _finite(send_start_time, "send_start_time", flow_id) * TIME_UNIT_S
        end = _finite(send_end_time, "send_end_time", flow_id) * TIME_UNIT_S
        if not end - start >= MIN_DURATION_S:
            raise MeasurementError(f"flow {_show(flow_id)}: send_end_time ({end:g}) must be at "
                                   f"least {MIN_DURATION_S:g} s after send_start_time "
                                   f"({start:g})")
        counts = {name: _finite(value, name, flow_id, 0.0, MAX_BYTES) for name, value in
                  (("bytes_sent", bytes_sent), ("bytes_acked", bytes_acked),
                   ("bytes_lost", bytes_lost))}
        rtts = self._rtts(flow_id, flow, rtt_samples, start, end, recv_start_time,
                          recv_end_time)
        measurement = {**counts, "send_start_s": start, "send_end_s": end,
                       "rtt_samples_s": rtts}
        try:
            with np.errstate(over="ignore"):  # a zero throughput: the send ratio reads 1
                rate = float(flow.ctrl.decide(measurement))
        except MeasurementError as e:
            raise MeasurementError(f"flow {_show(flow_id)}: {e}") from None
        low, high = self.active_clip_bps
        if not (math.isfinite(rate) and low <= rate <= high):
            flow.ctrl.session.rate_bps[:] = flow.rate  # the session multiplies from it
            raise MeasurementError(f"flow {_show(flow_id)}: the policy's rate {rate!r} is not "
                                   f"finite within [{low:g}, {high:g}] bit/s")
        flow.rate, flow.samples, flow.latency = rate, flow.samples + 1, sum(rtts) / len(rtts)
        return rate

    def _rtts(self, flow_id: Any, flow: _Flow, samples: Any, start: float, end: float,
              recv_start: Any, recv_end: Any) -> list[float]:
        """The interval's RTT samples (s): PCC's floats when it passes floats, else the ACK
        latencies its times give (see the module docstring); the flow's last latency when
        neither is usable."""
        if not isinstance(samples, (list, tuple)):
            raise MeasurementError(f"flow {_show(flow_id)}: rtt_samples must be a list, got "
                                   f"{_show(samples)}")
        if samples and all(isinstance(r, float) for r in samples):
            found = [r * TIME_UNIT_S for r in samples]
        else:
            self._once("whole seconds", "pcc: RTT samples arrive as integers (PCC-Uspace passes "
                       "them through PyLong_FromLong: whole seconds); latencies are taken from "
                       "the ACK times instead (recv - send)")
            found = [_finite(recv_start, "recv_start_time", flow_id) * TIME_UNIT_S - start,
                     _finite(recv_end, "recv_end_time", flow_id) * TIME_UNIT_S - end]
        rtts = [r for r in found if math.isfinite(r) and 0.0 < r <= MAX_RTT_S]
        if not rtts and flow.latency is not None:
            rtts = [flow.latency]
        if not rtts:
            raise MeasurementError(f"flow {_show(flow_id)}: no RTT in (0, {MAX_RTT_S:g}] s in "
                                   f"this interval and none before it")
        return rtts

    def get_rate(self, flow_id: Any) -> float:
        """The flow's sending rate, bit/s: always a finite Python float within the clip."""
        try:
            return float(self._known(flow_id).rate)
        except Exception as e:  # noqa: BLE001 (an exception or a non-float kills the sender)
            self._failed(flow_id, e)
            return float(self.fallback_rate_bps)

    def reset(self, flow_id: Any = None) -> None:
        """Start the flow over (every flow when ``flow_id`` is None)."""
        try:
            if flow_id is None:
                with self._lock:
                    flows = list(self._flows.items())
                for key, flow in flows:
                    self._start(key, flow)
            else:
                self._start(flow_id, self._known(flow_id))
        except Exception as e:  # noqa: BLE001 (never reaches PCC)
            self._failed(flow_id, e)

    @property
    def flows(self) -> list:
        """The flow ids initialised so far."""
        with self._lock:
            return list(self._flows)

    def stats(self, flow_id: Any) -> dict[str, Any]:
        """A flow's rate (bit/s), intervals used, unusable calls and the last one's reason."""
        with self._lock:
            flow = self._flows[flow_id]
        return {"rate_bps": flow.rate, "samples": flow.samples, "errors": flow.errors,
                "last_error": flow.last_error}

    def _known(self, flow_id: Any) -> _Flow:
        """The flow; one PCC never initialised (or whose init failed) is started now."""
        with self._lock:
            flow = self._flows.get(flow_id)
        if flow is None:
            self._once(f"unknown {_show(flow_id)}", f"pcc flow {_show(flow_id)}: not "
                       "initialised (no init call, or it failed); starting it now")
            flow = self._init(flow_id)
        return flow

    def _start(self, flow_id: Any, flow: _Flow) -> None:
        if flow.samples or flow.errors:
            log.info("pcc flow %s: %d monitor intervals, %d unusable calls, last rate %.3f "
                     "Mbit/s, reset", _show(flow_id), flow.samples, flow.errors, flow.rate / 1e6)
        flow.ctrl.reset(initial_rate_bps=self.initial_rate_bps)
        rate = float(flow.ctrl.decide(None))
        low, high = self.active_clip_bps
        if not (math.isfinite(rate) and low <= rate <= high):
            rate = self.fallback_rate_bps
            flow.ctrl.session.rate_bps[:] = rate
        flow.rate, flow.samples, flow.errors, flow.latency, flow.last_error = (
            rate, 0, 0, None, None)

    def _failed(self, flow_id: Any, err: BaseException) -> None:
        """Log an unusable call (the first LOGGED_ERRORS of a flow), count it."""
        text = str(err) if isinstance(err, MeasurementError) else (
            f"flow {_show(flow_id)}: {type(err).__name__}: {_show(str(err))}")
        try:
            with self._lock:
                flow = self._flows.get(flow_id)
        except TypeError:  # an unhashable id
            flow = None
        if flow is None:
            self._once(f"failed {_show(flow_id)}", f"pcc: {text}; that flow is answered "
                       f"{self.fallback_rate_bps:g} bit/s")
            return
        flow.errors += 1
        flow.last_error = text
        if flow.errors <= LOGGED_ERRORS:
            more = ("; later ones are counted, not logged" if flow.errors == LOGGED_ERRORS
                    else "")
            log.warning("pcc: interval not used, rate kept at %.6g bit/s: %s%s", flow.rate,
                        text, more)

    def _once(self, key: str, message: str) -> None:
        """Log ``message`` the first time ``key`` is seen (at most 1,000 keys)."""
        with self._lock:
            if key in self._logged_once or len(self._logged_once) >= 1000:
                return
            self._logged_once.add(key)
        log.warning(message)


def pcc_rl_deployment(contract: dict) -> dict[str, Any]:
    """PCC-RL's deployed clip and start as the contract states them, else :data:`PCC_PROFILE`."""
    stated = contract.get("action", {}).get("pcc_rl_deployment", {})
    clip = stated.get("clip_bps", PCC_PROFILE["clip_bps"])
    return {"clip_bps": (float(clip[0]), float(clip[1])),
            "initial_rate_bps": float(stated.get("initial_bps", PCC_PROFILE["initial_rate_bps"]))}


_bound: AuroraFlows | None = None
_bind_lock = threading.Lock()
_unbound_logged = False


def bind(export_dir: str, profile: str = "contract",
         initial_rate_bps: float | None = None) -> AuroraFlows:
    """Bind the module-level functions to ``export_dir`` (replacing any earlier binding)."""
    global _bound
    flows = AuroraFlows(export_dir, profile, initial_rate_bps)
    with _bind_lock:
        _bound = flows
    return flows


def unbind() -> None:
    """Forget the binding (the next call binds from the environment again)."""
    global _bound
    with _bind_lock:
        _bound = None


def bound() -> AuroraFlows:
    """The bound flows; bound on first use from ``PLUME_PCC_EXPORT`` (and
    ``PLUME_PCC_PROFILE``) when :func:`bind` was not called. RuntimeError without either."""
    global _bound
    with _bind_lock:
        if _bound is None:
            export = os.environ.get(EXPORT_ENV)
            if not export:
                raise RuntimeError(f"plume.deploy.adapters.pcc is not bound to an export: call "
                                   f"bind(EXPORT_DIR) or set {EXPORT_ENV}")
            _bound = AuroraFlows(export, os.environ.get(PROFILE_ENV, "contract"))
        return _bound


def _flows_or_none() -> AuroraFlows | None:
    """The bound flows, or None (logged once) when no binding can be made: the module-level
    functions are PCC's too, and must not raise."""
    global _unbound_logged
    try:
        return bound()
    except Exception as e:  # noqa: BLE001 (never reaches PCC)
        if not _unbound_logged:
            _unbound_logged = True
            log.error("pcc: %s; get_rate answers PCC-RL's start rate, %g bit/s", _show(str(e)),
                      PCC_PROFILE["initial_rate_bps"])
        return None


def init(flow_id: Any) -> None:
    """PCC's ``init``: a new flow."""
    flows = _flows_or_none()
    if flows is not None:
        flows.init(flow_id)


def give_sample(flow_id: Any, bytes_sent: Any, bytes_acked: Any, bytes_lost: Any,
                send_start_time: Any, send_end_time: Any, recv_start_time: Any,
                recv_end_time: Any, rtt_samples: Any, packet_size: Any = None,
                utility: Any = 0.0) -> None:
    """PCC's ``give_sample``: one monitor interval (times in seconds)."""
    flows = _flows_or_none()
    if flows is not None:
        flows.give_sample(flow_id, bytes_sent, bytes_acked, bytes_lost, send_start_time,
                          send_end_time, recv_start_time, recv_end_time, rtt_samples,
                          packet_size, utility)


def get_rate(flow_id: Any = None) -> float:
    """PCC's ``get_rate``: bit/s, a finite float."""
    flows = _flows_or_none()
    if flows is None:
        return float(PCC_PROFILE["initial_rate_bps"])
    return flows.get_rate(flow_id)


def reset(flow_id: Any = None) -> None:
    """PCC's ``reset`` (no argument: every flow)."""
    flows = _flows_or_none()
    if flows is not None:
        flows.reset(flow_id)


_MODULE = '''"""PCC-Uspace rate-control helper: the Plume export {export} ({profile} clip,
flows start at {rate:g} bit/s).

Written by plume-serve pcc for Python {version}. Load it with -pyhelper={name}
-pypath={directory}; PCC-Uspace must embed Python {version} (rebuild it against that
interpreter), or numpy and onnxruntime cannot be imported, and its embedded Python must find
that installation's standard library (start PCC with {bindir} first on PATH).
"""

import sys

_PYTHON = {version_info!r}
if sys.version_info[:2] != _PYTHON:
    raise ImportError("%s: written for Python %d.%d (%s); this process embeds Python %d.%d: "
                      "rebuild PCC-Uspace against Python %d.%d"
                      % ({name!r}, *_PYTHON, {executable!r}, *sys.version_info[:2], *_PYTHON))

for _path in {paths!r}:
    if _path not in sys.path:
        sys.path.append(_path)

try:
    from plume.deploy.adapters.pcc import AuroraFlows
except ImportError as _err:  # e.g. the embedded Python found another installation's stdlib
    raise ImportError("%s: cannot import Plume here (%s); this embedded Python's prefix is %s, "
                      "the environment's is %s: start PCC with %s first on PATH, or with "
                      "PYTHONHOME=%s" % ({name!r}, _err, sys.prefix, {base_prefix!r},
                                         {bindir!r}, {base_prefix!r})) from None

_flows = AuroraFlows({export!r}, profile={profile!r}, initial_rate_bps={rate!r})
init = _flows.init
give_sample = _flows.give_sample
get_rate = _flows.get_rate
reset = _flows.reset
'''


def write_module(export_dir: str, directory: str, name: str = "plume_aurora",
                 profile: str = "contract", initial_rate_bps: float | None = None) -> Path:
    """Write ``<directory>/<name>.py``, a helper module PCC-Uspace imports, bound to
    ``export_dir``; checks the name, the start rate and that the export loads before writing
    anything (ValueError in one line). Returns the file's path."""
    if not name.isidentifier():
        raise ValueError(f"module name {name!r} is not a Python identifier")
    if initial_rate_bps is not None:
        check_rate(initial_rate_bps)
    export = str(Path(export_dir).resolve())
    flows = AuroraFlows(export, profile, initial_rate_bps)  # refuse a broken export now
    paths = []
    for module in ("plume", "numpy", "onnxruntime"):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            root = str(Path(spec.origin).resolve().parents[1])
            if root not in paths:
                paths.append(root)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.py"
    version = "{}.{}".format(*sys.version_info[:2])
    path.write_text(_MODULE.format(
        export=export, profile=profile, name=name, paths=paths, directory=str(out.resolve()),
        rate=flows.initial_rate_bps, version=version, version_info=tuple(sys.version_info[:2]),
        executable=sys.executable, base_prefix=sys.base_prefix,
        bindir=str(Path(sys.executable).parent)))
    return path
