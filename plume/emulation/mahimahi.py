"""Mahimahi's own shells (``mm-delay``, ``mm-link``, ``mm-loss``) instead of Plume's link, as a
cross-check (``emulation.link=mahimahi``), with the emulator's interface (``popen``, ``run``,
``address``) so an emulation job runs unchanged over either.

Mahimahi's model (its README and ``mm-link`` man page): the command given to the shells runs
*inside* them and reaches the outside at ``$MAHIMAHI_BASE``; the outside cannot open
connections inward. So the side that starts the exchange is inside (ABR: the player, which
requests chunks; CC: the sender) and the other side listens outside. ``mm-link`` takes an
uplink (inside to outside) and a downlink trace; ``mm-delay`` one delay for both directions.

Everything happens in a network namespace this module creates (loopback, IP forwarding on:
Mahimahi checks it), so Mahimahi's interfaces and its NAT rule live and die there and never
touch the host. Mahimahi is installed setuid root and refuses to run with a root real user
id: the shells run as ``nobody`` (``setpriv``), so the programs they run, their files and the
Python environment must be readable by that user. Needs ``mm-delay``, ``mm-link`` (and
``mm-loss`` for a lossy link), ``iptables`` and ``setpriv`` on the PATH.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from plume.emulation.link import LinkSpec
from plume.emulation.netns import (
    EmulationUnavailable,
    Side,
    emulation_child,
    start_anchor,
    stop_all,
)

__all__ = ["BASE", "MahimahiShell", "missing_tools", "shell_argv"]

BASE = "$MAHIMAHI_BASE"
"""How the inside reaches the outside: the shells set this variable in the command's
environment (the argument is expanded by ``sh`` inside)."""
UNPRIVILEGED = ("65534", "65534")  # nobody, nogroup
SIDES = ("server", "client")


def missing_tools(lossy: bool = False) -> list[str]:
    """The programs a Mahimahi run needs that are not on the PATH."""
    needed = ["mm-delay", "mm-link", "iptables", "setpriv"] + (["mm-loss"] if lossy else [])
    return [tool for tool in needed if shutil.which(tool) is None]


def _queue_args(direction: str, spec: LinkSpec) -> list[str]:
    if spec.queue_packets is None and spec.queue_bytes is None:
        return []  # Mahimahi's default: an infinite queue
    bound = (f"packets={spec.queue_packets}" if spec.queue_packets is not None
             else f"bytes={spec.queue_bytes}")
    return [f"--{direction}-queue=droptail", f"--{direction}-queue-args={bound}"]


def shell_argv(uplink: LinkSpec, downlink: LinkSpec, uplink_trace: str, downlink_trace: str,
               command: Sequence[str]) -> list[str]:
    """``mm-delay D [mm-loss ...] mm-link UP DOWN [queues] -- sh -c COMMAND``: ``command``
    inside the shells, ``BASE`` in it expanded there. ``uplink`` is inside to outside."""
    if uplink.delay_ms != downlink.delay_ms or uplink.delay_ms != int(uplink.delay_ms):
        raise ValueError("mm-delay takes one whole number of milliseconds for both directions; "
                         f"got {uplink.delay_ms} up and {downlink.delay_ms} down")
    argv = ["mm-delay", str(int(uplink.delay_ms))]
    for direction, spec in (("uplink", uplink), ("downlink", downlink)):
        if spec.loss > 0:
            argv += ["mm-loss", direction, repr(spec.loss)]
    argv += ["mm-link", uplink_trace, downlink_trace,
             *_queue_args("uplink", uplink), *_queue_args("downlink", downlink), "--"]
    script = " ".join('"$MAHIMAHI_BASE"' if arg == BASE else shlex.quote(str(arg))
                      for arg in command)
    return [*argv, "sh", "-c", "exec " + script]


class MahimahiShell:
    """One namespace; ``inside`` ("client" or "server") runs in Mahimahi's shells, the other
    side outside them. ``down`` is server to client, as for :class:`Emulator`."""

    def __init__(self, down: LinkSpec, up: LinkSpec, inside: str) -> None:
        if inside not in SIDES:
            raise ValueError(f"inside must be one of {SIDES}, got {inside!r}")
        missing = missing_tools(lossy=down.loss > 0 or up.loss > 0)
        if missing:
            raise EmulationUnavailable(f"emulation.link=mahimahi needs {', '.join(missing)} "
                                       "on the PATH (Mahimahi installed setuid root)")
        self.inside = inside
        self.uplink, self.downlink = (up, down) if inside == "client" else (down, up)
        self._folder = tempfile.TemporaryDirectory(prefix="plume-mahimahi-")
        self._side: Side | None = None
        self._apps: list[subprocess.Popen] = []

    def __enter__(self) -> MahimahiShell:
        folder = Path(self._folder.name)
        folder.chmod(0o755)  # the shells read the traces as nobody
        for name, spec in (("uplink", self.uplink), ("downlink", self.downlink)):
            spec.schedule.to_mahimahi(folder / f"{name}.trace").chmod(0o644)
        self._side = start_anchor("-")
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def address(self, side: str) -> str:
        """How the inside reaches ``side`` (the outside only)."""
        if side == self.inside:
            raise ValueError(f"the {side} runs inside Mahimahi's shells: the outside cannot "
                             "open connections to it")
        return BASE

    def _argv(self, side: str, argv: Sequence[str]) -> list[str]:
        if side != self.inside:
            return self._side.command(argv)
        folder = Path(self._folder.name)
        shells = shell_argv(self.uplink, self.downlink, str(folder / "uplink.trace"),
                            str(folder / "downlink.trace"), argv)
        user, group = UNPRIVILEGED
        return self._side.command(["setpriv", f"--reuid={user}", f"--regid={group}",
                                   "--clear-groups", *shells])

    def popen(self, side: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        process = subprocess.Popen(self._argv(side, argv), preexec_fn=emulation_child,
                                   **kwargs)
        self._apps.append(process)
        return process

    def run(self, side: str, argv: Sequence[str], timeout: float, **kwargs):
        return subprocess.run(self._argv(side, argv), timeout=timeout,
                              preexec_fn=emulation_child, **kwargs)

    def close(self) -> None:
        stop_all(self._apps)
        if self._side is not None:
            self._side.close()
            self._side = None
        self._folder.cleanup()
