"""A default job never touches the network: no host name resolved, no socket to anything but
this machine, W&B included (offline is the default mode; only logger.mode=online goes out)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]

GUARD = r'''
import socket, sys
attempts = []
def _refuse(what):
    def refuse(*args, **kwargs):
        attempts.append((what, repr(args[:2])))
        raise OSError(f"network use forbidden in this test: {what}{args[:2]!r}")
    return refuse
for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr",
             "create_connection"):
    setattr(socket, name, _refuse(name))
_connect = socket.socket.connect
def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1"):
        attempts.append(("connect", repr(address)))
        raise OSError(f"network use forbidden in this test: connect {address!r}")
    return _connect(self, address)
socket.socket.connect = connect
import atexit
atexit.register(lambda: print("NETWORK-ATTEMPTS", len(attempts), attempts, file=sys.stderr))
sys.argv = ["plume-train", *sys.argv[1:]]
from plume.harness.apps.train import main
main()
'''


def _job(tmp_path: Path) -> list[str]:
    return [*TINY, f"paths.root={tmp_path}", "logger=wandb", "logger.mode=offline"]


def test_a_default_job_resolves_no_host_and_connects_nowhere(tmp_path):
    done = subprocess.run([sys.executable, "-c", GUARD, *_job(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NETWORK-ATTEMPTS 0 []" in done.stderr, done.stderr[-3000:]
    (status,) = tmp_path.glob("default/*/seed=0/status.json")
    assert json.loads(status.read_text())["state"] == "completed"
    assert list(status.parent.glob("wandb/offline-run-*/run-*.wandb"))  # W&B did write


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_no_process_of_a_default_job_resolves_or_connects(tmp_path):
    """The same, seen by the kernel for every process (W&B's Go service included)."""
    trace = tmp_path / "trace"
    done = subprocess.run(["strace", "-f", "-e", "trace=connect,sendto,sendmmsg", "-o",
                           str(trace), sys.executable, "-m", "plume.harness.apps.train",
                           *_job(tmp_path / "runs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr[-3000:]
    outward = [line for line in trace.read_text().splitlines()
               if re.search(r"AF_INET6?", line) and not re.search(r"127\.0\.0\.1|::1", line)]
    assert outward == [], outward[:5]
    assert not re.search(r"htons\(53\)", trace.read_text())  # no DNS query
