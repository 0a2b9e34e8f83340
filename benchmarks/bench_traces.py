"""Benchmark: loading one 10-million-line cooked file and one 10-million-line Mahimahi file.

Run from the repository root::

    python benchmarks/bench_traces.py [--lines 10000000] [--repeats 3] [--dir DIR]

Compares, each read in a fresh child process pinned to one CPU (``--repeats`` children per
case; time of the read call alone; peak RSS of the whole child, imports included, from its
``VmHWM``: Linux carries ``ru_maxrss`` over ``exec`` from the parent, so that would show the
parent's size when it is the larger):

* BEFORE: the line-by-line readers as they were before the Arrow fast path (commit d01c3d1),
  copied verbatim below as the baseline;
* AFTER: ``plume.traces.loaders.read_cooked`` and ``read_mahimahi``.

The cooked file holds random doubles in shortest round-trip form (up to 17 significant
digits, the float parser's hardest case); the Mahimahi file holds sorted integer timestamps.
Both readers' arrays are hashed in the children: the benchmark also checks they are
bit-identical. Target: AFTER at least 10x faster than BEFORE on the cooked file.
"""

from __future__ import annotations

import single_thread  # noqa: F401,E402  (one thread; must precede numpy)

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from plume.traces.loaders import MBPS_PER_PACKET_PER_MS, ForwardTrace, _bin_ms
from plume.traces.traceset import TraceFileError

TARGET_SPEEDUP = 10.0
HERE = Path(__file__).resolve().parent


# --------------------------------------------------------------------------------------
# BEFORE (baseline): the line-by-line readers of commit d01c3d1, copied verbatim
# --------------------------------------------------------------------------------------


def _data_lines(path: Path, trace_id: str) -> list[tuple[int, str]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise TraceFileError(path, f"cannot be read as text ({err})", trace_id=trace_id) from None
    lines = ((n, s.strip()) for n, s in enumerate(text.splitlines(), 1))
    return [(n, s) for n, s in lines if s and not s.startswith("#")]


def _first_problem(path, trace_id, lines, checks, values) -> None:
    for bad, message in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise TraceFileError(path, message.format(value=values[i]), lines[i], trace_id)


def before_read_cooked(path: str | Path) -> ForwardTrace:
    path = Path(path)
    tid = path.stem
    rows = _data_lines(path, tid)
    if not rows:
        raise TraceFileError(path, "empty file: no 'time_s throughput_Mbps' lines", 1, tid)
    t, bw = _cooked_columns(path, tid, rows)
    lines = [n for n, _ in rows]
    _first_problem(path, tid, lines, [(~np.isfinite(t), "time {value} is not finite")], t)
    t = t - t[0]
    _first_problem(path, tid, lines, [
        (~np.isfinite(bw), "throughput {value} is NaN or infinite"),
        (bw < 0, "throughput {value} Mbit/s is negative"),
        (np.r_[False, np.diff(t) <= 0], "time does not increase (cooked times must strictly "
                                        "increase)")], bw)
    if len(t) < 2:
        raise TraceFileError(path, "only 1 sample: a cooked trace needs at least 2 (the first "
                                   "only marks the start time)", lines[0], tid)
    if not np.any(bw[1:] > 0):
        raise TraceFileError(path, "throughput is zero on every interval, a download on it "
                                   "would never finish", lines[1], tid)
    return ForwardTrace(t[:-1].copy(), bw[1:].copy(), float(t[-1]))


def _cooked_columns(path: Path, tid: str, rows) -> tuple[np.ndarray, np.ndarray]:
    values = []
    for line, text in rows:
        fields = text.split()
        if len(fields) != 2:
            raise TraceFileError(path, f"expected 2 columns 'time_s throughput_Mbps', got "
                                       f"{len(fields)}: {text[:60]!r}", line, tid)
        try:
            values.append((float(fields[0]), float(fields[1])))
        except ValueError:
            raise TraceFileError(path, f"non-numeric field in {text[:60]!r}", line,
                                 tid) from None
    table = np.array(values, dtype=np.float64)
    return table[:, 0], table[:, 1]


def before_read_mahimahi(path: str | Path, bin_s: float = 0.1) -> ForwardTrace:
    path = Path(path)
    bin_ms = _bin_ms(bin_s)
    stamps, lines = _mahimahi_stamps(path, path.stem)
    period = int(stamps[-1])
    if period == 0:
        raise TraceFileError(path, "zero period: the last timestamp (the loop period) is 0 ms",
                             lines[-1], path.stem)
    n_bins = -(-period // bin_ms)
    counts = np.bincount((stamps % period) // bin_ms, minlength=n_bins)
    width_ms = np.minimum(bin_ms, period - np.arange(n_bins) * bin_ms)
    return ForwardTrace(np.arange(n_bins) * bin_ms / 1000.0,
                        counts * MBPS_PER_PACKET_PER_MS / width_ms, period / 1000.0)


_INTEGER = re.compile(r"[+-]?\d+")


def _mahimahi_stamps(path: Path, tid: str) -> tuple[np.ndarray, list[int]]:
    rows = _data_lines(path, tid)
    if not rows:
        raise TraceFileError(path, "empty file: no millisecond timestamps", 1, tid)
    for line, text in rows:
        if not _INTEGER.fullmatch(text):
            raise TraceFileError(path, f"{text[:40]!r} is not an integer millisecond "
                                       "timestamp", line, tid)
    stamps = np.array([int(s) for _, s in rows], dtype=np.int64)
    lines = [n for n, _ in rows]
    _first_problem(path, tid, lines, [
        (stamps < 0, "timestamp {value} ms is negative"),
        (np.r_[False, np.diff(stamps) < 0], "timestamp {value} ms is smaller than the one "
                                            "before (timestamps must not decrease)")], stamps)
    return stamps, lines


# --------------------------------------------------------------------------------------
# files, children, table
# --------------------------------------------------------------------------------------


def write_files(folder: Path, n_lines: int, seed: int = 0) -> tuple[Path, Path]:
    """The cooked and the Mahimahi file, written by Arrow's CSV writer (no per-line Python)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    rng = np.random.default_rng(seed)
    options = pcsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
    cooked, mahimahi = folder / "cooked_10M.txt", folder / "mahimahi_10M.down"
    time_s = np.cumsum(rng.uniform(0.05, 1.5, n_lines))
    table = pa.table({"t": time_s, "bw": rng.lognormal(1.0, 1.0, n_lines)})
    pcsv.write_csv(table, cooked, write_options=options)
    stamps = np.sort(rng.integers(0, 3_600_000, n_lines))
    pcsv.write_csv(pa.table({"ms": stamps}), mahimahi, write_options=options)
    return cooked, mahimahi


CHILD = """
import hashlib, json, os, resource, sys, time
sys.path.insert(0, {here!r})
import single_thread
single_thread.pin_to_one_cpu()
import bench_traces as bench
from plume.traces import loaders
reader = {{"before": {{"cooked": bench.before_read_cooked, "mahimahi": bench.before_read_mahimahi}},
          "after": {{"cooked": loaders.read_cooked, "mahimahi": loaders.read_mahimahi}},
          "imports": {{}}}}[sys.argv[1]].get(sys.argv[2])
seconds, digest = 0.0, ""
if reader is not None:
    start = time.perf_counter()
    trace = reader(sys.argv[3])
    seconds = time.perf_counter() - start
    digest = hashlib.sha256(trace.time.tobytes() + trace.bandwidth.tobytes()
                            + repr(trace.period).encode()).hexdigest()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if os.path.exists("/proc/self/status"):  # this image's own peak, not the parent's
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
    rss = int(hwm[0].split()[1]) * 1024 if hwm else rss
print(json.dumps({{"seconds": seconds, "rss": rss, "digest": digest}}))
"""


def run_child(version: str, case: str, path: Path) -> dict:
    """One read in a fresh interpreter; its time, its own peak RSS and its arrays' hash."""
    done = subprocess.run([sys.executable, "-c", CHILD.format(here=str(HERE)), version, case,
                           str(path)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"child {version}/{case} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(runs: list[dict]) -> dict:
    """Best and median time, median peak RSS and the distinct hashes of one case's runs."""
    seconds = [r["seconds"] for r in runs]
    return {"best": min(seconds), "median": statistics.median(seconds),
            "rss": statistics.median(r["rss"] for r in runs),
            "digests": {r["digest"] for r in runs}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3, help="fresh children per case")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the files")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        files = dict(zip(("cooked", "mahimahi"), write_files(Path(folder), args.lines)))
        sizes = {k: p.stat().st_size / 2**20 for k, p in files.items()}
        base = run_child("imports", "none", files["cooked"])
        runs: dict[tuple[str, str], list[dict]] = {}
        for _ in range(args.repeats):  # interleaved, so load changes hit both readers alike
            for case, path in files.items():
                for version in ("before", "after"):
                    runs.setdefault((version, case), []).append(run_child(version, case, path))
    stats = {key: summarise(value) for key, value in runs.items()}
    print_table(args, sizes, base, stats)


def print_table(args, sizes: dict, base: dict, stats: dict) -> None:
    print(f"Loading one {args.lines:,}-line file, {args.repeats} fresh children per row, each "
          f"pinned to one CPU; numpy {np.__version__}; a child's imports alone peak at "
          f"{base['rss'] / 2**20:.0f} MiB RSS")
    print()
    print(f"{'file':<20} {'reader':<31} {'best s':>7} {'median s':>9} {'peak RSS MiB':>13}")
    labels = {"before": "BEFORE: line by line (d01c3d1)", "after": "AFTER: loaders (Arrow path)"}
    for case, size in sizes.items():
        for version in ("before", "after"):
            row = stats[(version, case)]
            print(f"{f'{case} ({size:.0f} MiB)':<20} {labels[version]:<31} {row['best']:>7.2f} "
                  f"{row['median']:>9.2f} {row['rss'] / 2**20:>13.0f}")
    print()
    for case in sizes:
        before, after = stats[("before", case)], stats[("after", case)]
        same = "yes" if len(before["digests"] | after["digests"]) == 1 else "NO"
        print(f"{case:<9} speed-up {before['median'] / after['median']:5.1f}x (median), "
              f"{before['best'] / after['best']:5.1f}x (best); peak RSS "
              f"{before['rss'] / after['rss']:4.1f}x lower; arrays bit-identical: {same}")
    cooked = stats[("before", "cooked")]["median"] / stats[("after", "cooked")]["median"]
    print(f"target >= {TARGET_SPEEDUP:.0f}x on the cooked file (medians): "
          f"{'met' if cooked >= TARGET_SPEEDUP else 'NOT met'} ({cooked:.1f}x)")


if __name__ == "__main__":
    main()
