"""PCC-Uspace's Python rate-control helper backed by a Plume Aurora export.

PCC-Uspace's sender (``src/pcc/rate_control/pcc_python_rc.cpp``) embeds Python, imports the
module named by ``-pyhelper=`` from ``-pypath=`` and calls, per flow (an integer id):

* ``init(flow_id)`` when the flow's controller is built;
* ``give_sample(flow_id, bytes_sent, bytes_acked, bytes_lost, send_start_time, send_end_time,
  recv_start_time, recv_end_time, rtt_samples, packet_size, utility)`` once per finished
  monitor interval. Times are **seconds** (PCC-Uspace divides microseconds by
  ``USEC_PER_SEC``, relative to the flow's first interval), ``rtt_samples`` a list of seconds
  (the interval's first and last ACK latency), ``packet_size`` bytes; ``utility`` (PCC's own)
  is ignored. :data:`TIME_UNIT_S` converts a fork that passes other units;
* ``get_rate(flow_id)``: the sending rate in bit/s, a Python float (PCC-Uspace checks
  ``PyFloat_Check`` and exits otherwise);
* ``reset(flow_id)``: start the flow over. Older PCC-Uspace versions call ``reset()`` with no
  argument; that resets every flow.

A flow starts at ``initial_rate_bps`` (PCC-RL's 6 Mbit/s unless told; PCC passes none),
clipped by the active clip, and ``init`` / ``reset`` make the first decision on the empty
history, as the simulator's first step does. Each sample is then one ``ctrl.decide`` (one
monitor interval, as in the simulator); ``get_rate`` returns the latest decision however often
it is called. (PCC-RL's ``loaded_client.py`` instead acts again on every ``get_rate`` call.)
The interval's rates are its bytes over the send duration, as the simulator measures them
(``recv_*`` times are not used).

Rate clip profiles: ``"contract"`` (default) clips the rate to the export's training clip
(``contract["action"]["clip_bps"]``); ``"pcc"`` uses PCC-RL's deployment clip, [0.5, 300]
Mbit/s (the contract's ``action.pcc_rl_deployment``, else :data:`PCC_PROFILE`, from
``loaded_client.py``). A policy never saw rates outside its training clip, so the contract
profile is the faithful one; the PCC profile reproduces PCC-RL's setup.

Caveat: PCC-Uspace at commit 42751d7 builds ``rtt_samples`` with ``PyLong_FromLong`` on a
double of seconds, truncating RTTs to whole seconds (usually 0). A flow whose samples are all
integer zeros while bytes are acknowledged is warned about once: its latency features are
meaningless until PCC-Uspace passes floats.

An unknown ``flow_id`` raises ValueError naming the flow; a malformed sample raises the
runtime's ``MeasurementError`` naming the flow and the field; the flow's state is unchanged.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plume.deploy.runtime import MeasurementError, load_controller

__all__ = [
    "EXPORT_ENV", "PCC_PROFILE", "PROFILES", "TIME_UNIT_S", "AuroraFlows", "bind", "bound",
    "get_rate", "give_sample", "init", "pcc_rl_deployment", "reset", "unbind", "write_module",
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


@dataclass
class _Flow:
    ctrl: Any
    rate: float = 0.0
    samples: int = 0
    warned_rtt: bool = False


class AuroraFlows:
    """PCC's four helper functions as methods, one controller session per flow id."""

    def __init__(self, export_dir: str, profile: str = "contract",
                 initial_rate_bps: float | None = None) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown rate profile {profile!r}: use one of {PROFILES}")
        self.export_dir, self.profile = str(export_dir), profile
        first = load_controller(self.export_dir)  # fail at load time, not at the first flow
        if first.env != "cc":
            raise ValueError(f"{self.export_dir}: PCC's helper needs a cc export, got {first.env}")
        self.contract = first.contract
        pcc_rl = pcc_rl_deployment(self.contract)
        self.clip_bps = pcc_rl["clip_bps"] if profile == "pcc" else None
        """The rate clip when not the contract's training clip (bit/s)."""
        self.initial_rate_bps = float(pcc_rl["initial_rate_bps"] if initial_rate_bps is None
                                      else initial_rate_bps)
        if self.clip_bps is not None:
            first = self._load()
        self._spare = [first]
        self._flows: dict[Any, _Flow] = {}
        self._lock = threading.Lock()

    def _load(self) -> Any:
        return load_controller(self.export_dir, clip_bps=self.clip_bps)

    def init(self, flow_id: Any) -> None:
        """A new flow (an id seen before starts over)."""
        with self._lock:
            flow = self._flows.get(flow_id)
            if flow is None:
                flow = _Flow(ctrl=self._spare.pop() if self._spare else self._load())
                self._flows[flow_id] = flow
        self._start(flow_id, flow)

    def give_sample(self, flow_id: Any, bytes_sent: float, bytes_acked: float, bytes_lost: float,
                    send_start_time: float, send_end_time: float, recv_start_time: float,
                    recv_end_time: float, rtt_samples: Any, packet_size: float,
                    utility: float = 0.0) -> None:
        """One finished monitor interval: the flow's next rate is decided now."""
        flow = self._flow(flow_id)
        try:
            samples = [float(r) * TIME_UNIT_S for r in rtt_samples]
        except (TypeError, ValueError):
            raise MeasurementError(f"flow {flow_id}: rtt_samples must be a list of numbers, got "
                                   f"{rtt_samples!r:.60}") from None
        start = _seconds(send_start_time, "send_start_time", flow_id)
        end = _seconds(send_end_time, "send_end_time", flow_id)
        if end <= start:
            raise MeasurementError(f"flow {flow_id}: send_end_time ({send_end_time}) must be "
                                   f"after send_start_time ({send_start_time})")
        measurement = {"bytes_sent": bytes_sent, "bytes_acked": bytes_acked,
                       "bytes_lost": bytes_lost, "send_start_s": start, "send_end_s": end,
                       "rtt_samples_s": samples, "packet_size": packet_size}
        self._warn_whole_seconds(flow_id, flow, rtt_samples, bytes_acked)
        try:
            rate = float(flow.ctrl.decide(measurement))
        except MeasurementError as e:
            raise MeasurementError(f"flow {flow_id}: {e}") from None
        flow.rate, flow.samples = rate, flow.samples + 1

    def get_rate(self, flow_id: Any) -> float:
        """The flow's sending rate, bit/s (a Python float)."""
        return float(self._flow(flow_id).rate)

    def reset(self, flow_id: Any = None) -> None:
        """Start the flow over (every flow when ``flow_id`` is None)."""
        if flow_id is None:
            with self._lock:
                flows = list(self._flows.items())
            for key, flow in flows:
                self._start(key, flow)
        else:
            self._start(flow_id, self._flow(flow_id))

    @property
    def flows(self) -> list:
        """The flow ids initialised so far."""
        with self._lock:
            return list(self._flows)

    def _flow(self, flow_id: Any) -> _Flow:
        with self._lock:
            flow = self._flows.get(flow_id)
        if flow is None:
            raise ValueError(f"unknown flow {flow_id!r}: call init({flow_id!r}) first")
        return flow

    def _start(self, flow_id: Any, flow: _Flow) -> None:
        if flow.samples:
            log.info("pcc flow %s: %d monitor intervals, last rate %.3f Mbit/s, reset",
                     flow_id, flow.samples, flow.rate / 1e6)
        flow.ctrl.reset(initial_rate_bps=self.initial_rate_bps)
        flow.rate, flow.samples = float(flow.ctrl.decide(None)), 0

    def _warn_whole_seconds(self, flow_id: Any, flow: _Flow, rtt: Any, acked: Any) -> None:
        if flow.warned_rtt or not rtt or not acked:
            return
        if all(isinstance(r, int) and r == 0 for r in rtt):
            flow.warned_rtt = True
            log.warning("pcc flow %s: RTT samples are integer zeros with bytes acknowledged; "
                        "PCC-Uspace truncates them to whole seconds (PyLong_FromLong)", flow_id)


def pcc_rl_deployment(contract: dict) -> dict[str, Any]:
    """PCC-RL's deployed clip and start as the contract states them, else :data:`PCC_PROFILE`."""
    stated = contract.get("action", {}).get("pcc_rl_deployment", {})
    clip = stated.get("clip_bps", PCC_PROFILE["clip_bps"])
    return {"clip_bps": (float(clip[0]), float(clip[1])),
            "initial_rate_bps": float(stated.get("initial_bps", PCC_PROFILE["initial_rate_bps"]))}


def _seconds(value: Any, name: str, flow_id: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MeasurementError(f"flow {flow_id}: {name} must be a number, got {value!r:.40}")
    return float(value) * TIME_UNIT_S


_bound: AuroraFlows | None = None
_bind_lock = threading.Lock()


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
    ``PLUME_PCC_PROFILE``) when :func:`bind` was not called."""
    global _bound
    with _bind_lock:
        if _bound is None:
            export = os.environ.get(EXPORT_ENV)
            if not export:
                raise RuntimeError(f"plume.deploy.adapters.pcc is not bound to an export: call "
                                   f"bind(EXPORT_DIR) or set {EXPORT_ENV}")
            _bound = AuroraFlows(export, os.environ.get(PROFILE_ENV, "contract"))
        return _bound


def init(flow_id: Any) -> None:
    """PCC's ``init``: a new flow."""
    bound().init(flow_id)


def give_sample(flow_id: Any, bytes_sent: float, bytes_acked: float, bytes_lost: float,
                send_start_time: float, send_end_time: float, recv_start_time: float,
                recv_end_time: float, rtt_samples: Any, packet_size: float,
                utility: float = 0.0) -> None:
    """PCC's ``give_sample``: one monitor interval (times and RTTs in seconds)."""
    bound().give_sample(flow_id, bytes_sent, bytes_acked, bytes_lost, send_start_time,
                        send_end_time, recv_start_time, recv_end_time, rtt_samples, packet_size,
                        utility)


def get_rate(flow_id: Any) -> float:
    """PCC's ``get_rate``: bit/s."""
    return bound().get_rate(flow_id)


def reset(flow_id: Any = None) -> None:
    """PCC's ``reset`` (no argument: every flow)."""
    bound().reset(flow_id)


_MODULE = '''"""PCC-Uspace rate-control helper: the Plume export {export} ({profile} clip,
flows start at {rate:g} bit/s).

Written by plume-serve pcc. Load it with -pyhelper={name} -pypath={directory}; the embedding
Python must be the version of the environment these paths come from.
"""

import sys

for _path in {paths!r}:
    if _path not in sys.path:
        sys.path.append(_path)

from plume.deploy.adapters.pcc import AuroraFlows

_flows = AuroraFlows({export!r}, profile={profile!r}, initial_rate_bps={rate!r})
init = _flows.init
give_sample = _flows.give_sample
get_rate = _flows.get_rate
reset = _flows.reset
'''


def write_module(export_dir: str, directory: str, name: str = "plume_aurora",
                 profile: str = "contract", initial_rate_bps: float | None = None) -> Path:
    """Write ``<directory>/<name>.py``, a helper module PCC-Uspace imports, bound to
    ``export_dir``; checks the export loads first. Returns the file's path."""
    if not name.isidentifier():
        raise ValueError(f"module name {name!r} is not a Python identifier")
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
    path.write_text(_MODULE.format(export=export, profile=profile, name=name, paths=paths,
                                   directory=str(out.resolve()), rate=flows.initial_rate_bps))
    return path
