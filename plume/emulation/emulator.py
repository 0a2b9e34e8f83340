"""The emulator: two namespaces (``netns.NamespacePair``) and the trace-driven link process
(``link.py``) between their TUN devices, as one context manager that always tears down.

    with Emulator(down=LinkSpec(Schedule.constant(12), delay_ms=40),
                  up=LinkSpec(Schedule.constant(12), delay_ms=40)) as emu:
        server = emu.popen("server", [sys.executable, "-m", "http.server", "8000"])
        client = emu.popen("client", ["curl", f"http://{emu.address('server')}:8000/"])
    emu.stats   # the link's counters (packets in, lost, queue drops, delivered, per second)
    emu.stats["lateness"]   # how late the link sent its packets: p50/p90/p99/max ms, and
                            # within_tolerance (p99 <= lateness_tolerance_ms)

The server side reaches the client at ``address("client")`` and the other way round; nothing
else is routable from either namespace (no default route, no host interface).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from plume.emulation.link import LATENESS_TOLERANCE_MS, LinkSpec
from plume.emulation.netns import ADDRESSES, NamespacePair, emulation_child, stop_all

__all__ = ["Emulator", "LinkSpec"]


class Emulator:
    """Namespaces plus the link; ``stats`` holds the link's counters after the exit, with its
    lateness judged against ``lateness_tolerance_ms`` (``link.LATENESS_TOLERANCE_MS``)."""

    def __init__(self, down: LinkSpec, up: LinkSpec, seconds: float | None = None,
                 lateness_tolerance_ms: float = LATENESS_TOLERANCE_MS) -> None:
        self.down, self.up, self.seconds = down, up, seconds
        self.lateness_tolerance_ms = lateness_tolerance_ms
        self.stats: dict[str, Any] | None = None
        self._pair: NamespacePair | None = None
        self._link: subprocess.Popen | None = None
        self._apps: list[subprocess.Popen] = []
        self._folder = tempfile.TemporaryDirectory(prefix="plume-emulation-")

    def __enter__(self) -> Emulator:
        self._pair = NamespacePair().__enter__()
        try:
            self._start_link()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start_link(self) -> None:
        folder = Path(self._folder.name)
        spec = {"down": self.down.to_json(), "up": self.up.to_json(), "seconds": self.seconds,
                "stats": str(folder / "stats.json"),
                "lateness_tolerance_ms": self.lateness_tolerance_ms}
        (folder / "spec.json").write_text(json.dumps(spec))
        fds = (self._pair.sides["server"].tun_fd, self._pair.sides["client"].tun_fd)
        self._link = subprocess.Popen(
            [sys.executable, "-c", "from plume.emulation.link import main; main()",
             str(folder / "spec.json"), *map(str, fds)], pass_fds=fds,
            preexec_fn=emulation_child)

    @staticmethod
    def address(side: str) -> str:
        """The IP address of ``side`` ("server" or "client") as the other side reaches it."""
        return ADDRESSES[side]

    def popen(self, side: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` in ``side``'s namespace; it is killed at the latest on exit."""
        process = self._pair.sides[side].popen(argv, **kwargs)
        self._apps.append(process)
        return process

    def pids(self) -> dict[str, list[int]]:
        """The processes the emulator runs: each namespace's anchor, the link, the apps."""
        sides = self._pair.sides if self._pair is not None else {}
        return {**{name: [side.anchor.pid] for name, side in sides.items()},
                "link": [self._link.pid] if self._link is not None else [],
                "apps": [p.pid for p in self._apps if p.poll() is None]}

    def run(self, side: str, argv: Sequence[str], timeout: float, **kwargs):
        """Run ``argv`` in ``side``'s namespace to completion (``subprocess.run`` semantics)."""
        return subprocess.run(self._pair.sides[side].command(argv), timeout=timeout,
                              preexec_fn=emulation_child, **kwargs)

    def close(self) -> None:
        """Stop the applications, then the link (its counters are read), then the
        namespaces."""
        stop_all(self._apps)
        if self._link is not None:
            if self._link.poll() is None:
                self._link.terminate()
            try:
                self._link.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._link.kill()
                self._link.wait()
            stats = Path(self._folder.name) / "stats.json"
            self.stats = json.loads(stats.read_text()) if stats.is_file() else None
            self._link = None
        if self._pair is not None:
            self._pair.close()
            self._pair = None
        self._folder.cleanup()
