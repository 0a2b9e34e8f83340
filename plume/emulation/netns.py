"""Two network namespaces joined by a user-space link: the emulator's sandbox.

Each side is a network namespace made by ``unshare --net`` around a small *anchor* process.
The anchor brings up loopback and a TUN device (``plume0``: a point-to-point address to the
other side; IPv6 off, so only the applications' packets cross the link), hands the TUN file
descriptor to the parent over a Unix socket pair, and then waits. The namespace lives exactly
as long as the processes in it and the TUN descriptors: nothing is named in ``/run/netns`` and
nothing is left behind when the emulator ends, also after Ctrl-C or SIGKILL. Every process
started here (anchors, the link, applications) gets ``PR_SET_PDEATHSIG`` = SIGKILL, so it dies
with the process that started it. The host's interfaces, routes and qdiscs are never touched.

Needs CAP_NET_ADMIN: root, or an unprivileged user namespace where the kernel allows one
(``unshare --user --map-root-user --net``); without either, :class:`EmulationUnavailable`
says so in one line.
"""

from __future__ import annotations

import array
import ctypes
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Sequence

__all__ = ["ADDRESSES", "EmulationUnavailable", "NamespacePair", "Side", "can_emulate",
           "start_anchor", "stop_all"]

ADDRESSES = {"server": "10.231.0.1", "client": "10.231.0.2"}
"""The TUN addresses of the two sides (a /32 each, the other side as the peer)."""
TUN_NAME = "plume0"
MTU = 1500
_PR_SET_PDEATHSIG = 1
_ANCHOR = r"""
import array, fcntl, os, socket, struct, subprocess, sys
name, address, peer, mtu, sock_fd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
TUNSETIFF, IFF_TUN, IFF_NO_PI = 0x400454CA, 0x0001, 0x1000
for conf in ("all", "default"):  # no IPv6 chatter (router solicitations) on the link
    try:
        with open(f"/proc/sys/net/ipv6/conf/{conf}/disable_ipv6", "w") as flag:
            flag.write("1")
    except FileNotFoundError:  # a kernel without IPv6
        pass
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
sock = socket.socket(fileno=sock_fd)
if name == "-":  # a namespace without a TUN device (Mahimahi makes its own): IP forwarding on
    with open("/proc/sys/net/ipv4/ip_forward", "w") as flag:
        flag.write("1")
    sock.sendmsg([b"ok"])
else:
    tun = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(tun, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    for cmd in (["ip", "link", "set", name, "mtu", mtu, "up"],
                ["ip", "addr", "add", address + "/32", "peer", peer + "/32", "dev", name]):
        subprocess.run(cmd, check=True)
    sock.sendmsg([b"ok"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [tun]))])
sock.recv(1)  # the parent closes its end when done (or dies): then this namespace ends
"""


class EmulationUnavailable(RuntimeError):
    """This machine or user cannot make network namespaces with TUN devices."""


def die_with_parent() -> None:
    """In a child before exec: SIGKILL when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


EMULATION_NICENESS = -10
"""The scheduling priority of every process an emulation starts, where the user may raise it
(root): the link's delivery times and the endpoints' replies are the measurement, and a
training job or test sharing the cores must not delay them (a 40 ms RTT read 43 ms on 2 busy
cores at the default priority)."""


def emulation_child() -> None:
    """In a child before exec: :func:`die_with_parent`, and run at EMULATION_NICENESS when
    allowed (otherwise at the inherited priority)."""
    die_with_parent()
    try:
        os.setpriority(os.PRIO_PROCESS, 0, EMULATION_NICENESS)
    except OSError:  # no CAP_SYS_NICE: an unprivileged user in a user namespace
        pass


def stop_all(processes: list[subprocess.Popen]) -> None:
    """Kill the processes still running, reap every one, and empty the list."""
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()
    processes.clear()


def _unshare_prefix() -> list[str]:
    """How to get a network namespace here: plain as root, through a user namespace else."""
    return (["unshare", "--net"] if os.geteuid() == 0
            else ["unshare", "--user", "--map-root-user", "--net"])


def can_emulate() -> str | None:
    """None when namespaces with a TUN device can be made here, else the one-line reason."""
    probe = [*_unshare_prefix(), sys.executable, "-c",
             "import os; os.close(os.open('/dev/net/tun', os.O_RDWR))"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"emulation needs unshare(1) and CAP_NET_ADMIN: {err}"
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["unknown error"])[-1]
        return ("emulation needs CAP_NET_ADMIN (root, or unprivileged user namespaces "
                f"enabled) and /dev/net/tun: {reason}")
    return None


@dataclass
class Side:
    """One namespace: its anchor process, TUN descriptor (held by the parent) and address."""

    name: str
    address: str
    anchor: subprocess.Popen
    tun_fd: int
    control: socket.socket

    @property
    def netns_path(self) -> str:
        return f"/proc/{self.anchor.pid}/ns/net"

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this namespace."""
        prefix = ["nsenter", f"--net={self.netns_path}"]
        if os.geteuid() != 0:
            prefix.insert(1, f"--user=/proc/{self.anchor.pid}/ns/user")
        return [*prefix, "--", *argv]

    def popen(self, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` in this namespace; it dies with this process."""
        return subprocess.Popen(self.command(argv), preexec_fn=emulation_child, **kwargs)

    def close(self) -> None:
        """End the namespace: close the TUN descriptor (if any), release and reap the
        anchor."""
        closers = [self.control.close]
        if self.tun_fd >= 0:
            closers.insert(0, lambda: os.close(self.tun_fd))
        for close in closers:
            try:
                close()
            except OSError:
                pass
        try:
            self.anchor.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.anchor.kill()
            self.anchor.wait()


def start_anchor(name: str, address: str = "", peer: str = "") -> Side:
    """A new network namespace around an anchor process: with a TUN device ``name`` at
    ``address`` (peer ``peer``), or, for ``name="-"``, loopback only and IP forwarding on
    (what Mahimahi's shells need inside it)."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    argv = [*_unshare_prefix(), sys.executable, "-c", _ANCHOR, name, address, peer,
            str(MTU), str(child.fileno())]
    anchor = subprocess.Popen(argv, pass_fds=(child.fileno(),), preexec_fn=die_with_parent,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    child.close()
    parent.settimeout(20)
    fds = array.array("i")
    try:
        _, ancillary, _, _ = parent.recvmsg(16, socket.CMSG_LEN(fds.itemsize))
    except (OSError, socket.timeout):
        anchor.kill()
        raise EmulationUnavailable(f"the {name} namespace did not start: "
                                   f"{anchor.stderr.read().decode()[-300:]}") from None
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:fds.itemsize])
    if name != "-" and not fds:
        anchor.kill()
        raise EmulationUnavailable(f"the {name} namespace sent no TUN descriptor")
    return Side(name, address, anchor, fds[0] if fds else -1, parent)


class NamespacePair:
    """The server and client namespaces, each with a TUN device whose descriptor this
    process holds; a context manager that always ends both."""

    def __init__(self) -> None:
        reason = can_emulate()
        if reason is not None:
            raise EmulationUnavailable(reason)
        self.sides: dict[str, Side] = {}

    def __enter__(self) -> NamespacePair:
        try:
            for name in ("server", "client"):
                other = "client" if name == "server" else "server"
                self.sides[name] = start_anchor(name, ADDRESSES[name], ADDRESSES[other])
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End both namespaces: close the TUN descriptors, release and reap the anchors."""
        for side in self.sides.values():
            side.close()
        self.sides.clear()
