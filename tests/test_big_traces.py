"""A trace folder with one 10-million-line cooked file among 22 short ones: the load is
refused with one line before padding, inside a 2 GiB address-space limit.

Padding the 23 traces to the longest would need 23 x 9,999,999 samples per channel (3.4 GiB
of float64); before the cap the job died with a MemoryError at 11 GiB. The load runs in a
child process so that its limit and its peak RSS are its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from plume.traces.traceset import MAX_PADDED_SAMPLES

BIG_LINES = 10_000_000
LIMIT_BYTES = 2 * 2**30
REPO = Path(__file__).resolve().parents[1]

# The child sets its limit before numpy or pyarrow load, then prints one JSON line. Its peak
# RSS is ru_maxrss, or VmHWM where /proc has it: Linux carries ru_maxrss over exec from the
# parent (pytest, maybe large after other tests), VmHWM is this image's own.
CHILD = """
import json, os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from plume.traces.loaders import TraceFileError, load_traces
try:
    load_traces(sys.argv[1], "cooked", "all")
    error = None
except TraceFileError as err:
    error = str(err)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if os.path.exists("/proc/self/status"):
    hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
    peak = int(hwm[0].split()[1]) * 1024 if hwm else peak
print(json.dumps({{"error": error, "maxrss": peak}}))
"""


def write_numbered_cooked(path: Path, n_lines: int) -> Path:
    """Write ``"%08d 1"`` lines (time 0..n-1 s, 1 Mbit/s) with numpy, no per-line Python."""
    digits = 8
    table = np.empty((n_lines, digits + 3), np.uint8)
    t = np.arange(n_lines, dtype=np.int32)
    for k in range(digits):
        table[:, digits - 1 - k] = t // 10**k % 10 + ord("0")
    table[:, digits:] = np.frombuffer(b" 1\n", np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(table.tobytes())
    return path


def run_limited(folder: Path) -> dict:
    """load_traces(folder, "cooked", "all") in a child under RLIMIT_AS = 2 GiB."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", CHILD.format(limit=LIMIT_BYTES), str(folder)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_writer_makes_the_expected_lines(tmp_path):
    path = write_numbered_cooked(tmp_path / "small", 12)
    assert path.read_text().splitlines()[:2] == ["00000000 1", "00000001 1"]
    assert path.read_text().splitlines()[-1] == "00000011 1"


@pytest.fixture(scope="module")
def big_folder(tmp_path_factory) -> Path:
    """22 short cooked traces and ``big.txt`` of 10 million lines."""
    folder = tmp_path_factory.mktemp("big") / "traces"
    for k in range(22):
        write_numbered_cooked(folder / f"short_{k:02d}.txt", 50 + k)
    write_numbered_cooked(folder / "big.txt", BIG_LINES)
    return folder


def test_ten_million_line_trace_among_22_is_refused_in_one_line_under_2_gib(big_folder):
    big = big_folder / "big.txt"
    result = run_limited(big_folder)
    samples = BIG_LINES - 1  # a cooked file's first line only marks the start time
    cells = 23 * samples
    assert result["error"] == (
        f"{big}: trace 'big': {samples:,} samples, the longest of 23 traces; padding every "
        f"trace to {samples:,} samples would take 23 x {samples:,} = {cells:,} samples per "
        f"channel ({cells * 16 / 2**30:.2f} GiB), over the limit of {MAX_PADDED_SAMPLES:,}: "
        f"split or resample this trace, or raise the limit to at least {cells:,} "
        "(env.max_padded_samples in plume-train, max_padded_samples= in load_traces)")
    assert "\n" not in result["error"] and "3.43 GiB" in result["error"]
    assert result["maxrss"] < LIMIT_BYTES


JOB = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
sys.argv = ["plume-train", *sys.argv[1:]]
from plume.harness.apps.train import main
try:
    main()
finally:
    hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
    print("peak", int(hwm[0].split()[1]) * 1024, file=sys.stderr)
"""


def test_plume_train_on_the_folder_is_refused_in_one_line_under_2_gib(big_folder, tmp_path):
    """The whole job, under the same 2 GiB address-space cap: one line, exit status 2, no run
    directory, no W&B run."""
    done = subprocess.run(
        [sys.executable, "-c", JOB.format(limit=LIMIT_BYTES), "env=abr", "env.variant=pensieve",
         "algo=a2c_pensieve", f"env.dataset={big_folder}", "env.trace_format=cooked",
         f"paths.root={tmp_path / 'runs'}", "logger=wandb"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "WANDB_SILENT": "true"})
    *lines, peak = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"plume-train: error: {big_folder / 'big.txt'}: trace 'big': "
                               "9,999,999 samples, the longest of ")
    assert int(peak.split()[1]) < LIMIT_BYTES
    assert list(tmp_path.iterdir()) == []
