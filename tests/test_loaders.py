"""Behaviour tests for plume.traces.loaders: cooked, Mahimahi, Puffer and npz files, splits.

Every file is written by the test into tmp_path; nothing touches the network.
"""

from __future__ import annotations

import csv
import logging
import pickle
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from plume.traces import TraceSet
from plume.traces import loaders as ld
from plume.traces.formats import cooked as cooked_format
from plume.traces.formats import mahimahi as mahimahi_format
from plume.traces.loaders import (
    PUFFER_FORMATS,
    TRACE_FORMATS,
    TraceFileError,
    describe_split,
    in_test_split,
    load_puffer,
    load_traces,
    read_cooked,
    read_mahimahi,
    write_cooked,
    write_mahimahi,
    write_puffer_sample,
)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _forward_megabits(trace: ld.ForwardTrace) -> float:
    return float(np.sum(trace.bandwidth * np.diff(np.append(trace.time, trace.period))))


def _names(n: int, test: bool) -> list[str]:
    """The first n names ``t<k>`` that the hash rule puts in test (or in train)."""
    return [f"t{k}" for k in range(10_000) if in_test_split(f"t{k}") == test][:n]


def _outcome(reader, path: Path, fast: bool, **kwargs):
    """A reader's arrays as raw bytes (so -0.0 and NaN bits count), or its error's type and
    text; ``fast=False`` forces the line-by-line reader."""
    with pytest.MonkeyPatch.context() as patch:
        if not fast:  # patched where the readers look it up: their format modules
            for module in (cooked_format, mahimahi_format):
                patch.setattr(module, "_fast_columns", lambda *args: None)
        try:
            trace = reader(path, **kwargs)
        except (TraceFileError, ValueError, OverflowError) as err:
            return type(err).__name__, str(err), getattr(err, "line", None)
    return trace.time.tobytes(), trace.bandwidth.tobytes(), trace.period


def _is_fast(path: Path, cooked: bool = True) -> bool:
    """Whether the Arrow path (not the line-by-line reader) parses ``path``."""
    if cooked:
        return ld._fast_columns(path, ("t", "bw"), ld.pa.float64(), ld._COOKED_BYTES) is not None
    return ld._fast_columns(path, ("ms",), ld.pa.int64(), ld._STAMP_BYTES) is not None


# ---------------------------------------------------------------------------------------
# TraceFileError
# ---------------------------------------------------------------------------------------

def test_trace_file_error_is_one_line_with_the_parts_given():
    err = TraceFileError("data/a.txt", "bad\nvalue", line=3, trace_id="a")
    assert str(err) == "data/a.txt:3: trace 'a': bad value"
    assert (err.path, err.line, err.trace_id) == ("data/a.txt", 3, "a")
    assert isinstance(err, ValueError)
    assert str(TraceFileError("f.csv", "no rows")) == "f.csv: no rows"
    assert str(TraceFileError("f.csv", "m", trace_id="s-1")) == "f.csv: trace 's-1': m"
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.line == 3


# ---------------------------------------------------------------------------------------
# cooked files
# ---------------------------------------------------------------------------------------

def test_read_cooked_converts_backward_samples_to_forward(tmp_path):
    trace = read_cooked(_write(tmp_path / "a.txt", "0 1\n1 2\n3 4\n"))
    np.testing.assert_array_equal(trace.time, [0.0, 1.0])
    np.testing.assert_array_equal(trace.bandwidth, [2.0, 4.0])
    assert trace.period == 3.0
    # the file carries 2 Mbit/s over (0, 1] and 4 over (1, 3]: 10 Mbit in one period
    assert _forward_megabits(trace) == 2 * 1 + 4 * 2


def test_read_cooked_shifts_the_start_and_skips_blank_and_comment_lines(tmp_path):
    trace = read_cooked(_write(tmp_path / "b.log", "# t bw\n\n10 5\n11 1\n  13.5\t2  \n"))
    np.testing.assert_array_equal(trace.time, [0.0, 1.0])
    np.testing.assert_array_equal(trace.bandwidth, [1.0, 2.0])
    assert trace.period == 3.5


def test_mixed_sampling_intervals_are_kept_without_resampling(tmp_path):
    _write(tmp_path / "fcc" / "f1", "0 1\n5 2\n10 3\n15 4\n")
    _write(tmp_path / "hsdpa" / "h1", "0 1\n1.0 2\n1.9 3\n3.2 4\n4.0 5\n5.1 6\n")
    traces = load_traces(tmp_path, "cooked", "all")
    assert traces.trace_ids.tolist() == ["fcc/f1", "hsdpa/h1"]
    np.testing.assert_array_equal(traces.lengths, [3, 5])
    np.testing.assert_array_equal(traces.time[0, :3], [0, 5, 10])
    np.testing.assert_array_equal(traces.time[1], [0, 1.0, 1.9, 3.2, 4.0])
    np.testing.assert_array_equal(traces.bandwidth[0], [2, 3, 4, 0, 0])  # padded
    np.testing.assert_array_equal(traces.constants["period"], [15, 5.1])
    assert traces.meta["units"]["bandwidth"] == "Mbit/s"
    assert traces.meta["files"] == {"fcc/f1": "fcc/f1", "hsdpa/h1": "hsdpa/h1"}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-3, 100.0), st.floats(0.0, 1000.0)),
                min_size=2, max_size=40))
def test_cooked_forward_conversion_preserves_megabits_per_period(samples):
    dt, bw = np.array(samples).T
    t = np.concatenate([[0.0], np.cumsum(dt[1:])])
    assume(np.all(np.diff(t) > 0) and np.any(bw[1:] > 0))
    with tempfile.TemporaryDirectory() as folder:
        trace = read_cooked(write_cooked(Path(folder) / "x.txt", t, bw))
    assert np.all(np.diff(trace.time) > 0) and trace.time[0] == 0
    assert trace.period == t[-1] and trace.period > trace.time[-1]
    assert _forward_megabits(trace) == float(np.sum(bw[1:] * np.diff(t)))


def test_write_cooked_with_a_period_inverts_read_cooked(tmp_path):
    original = read_cooked(_write(tmp_path / "a.txt", "0 7\n0.5 2\n2 4.25\n2.1 0\n3 1\n"))
    again = read_cooked(write_cooked(tmp_path / "b.txt", *original))
    for got, want in zip(again, original):
        np.testing.assert_array_equal(got, want)


COOKED_ERRORS = [
    ("0 1\n1 x\n", 2, "non-numeric"),
    ("0 1\n1 2 3\n", 2, "2 columns"),
    ("0 1\n# c\n2\n", 3, "2 columns"),
    ("0 1\n1 2\n1 3\n", 3, "does not increase"),
    ("0 1\n2 2\n1 3\n", 3, "does not increase"),
    ("0 1\n1 -2\n", 2, "negative"),
    ("0 1\n1 nan\n", 2, "NaN"),
    ("0 1\n1 inf\n", 2, "infinite"),
    ("0 1\nnan 1\n", 2, "not finite"),
    ("", 1, "empty"),
    ("# only a comment\n\n", 1, "empty"),
    ("0 1\n", 1, "at least 2"),
    ("0 0\n1 0\n2 0\n", 2, "zero"),
    ("0 5\n1 0\n", 2, "zero"),  # bw[0] is before the trace starts, so nothing is carried
]


@pytest.mark.parametrize(("content", "line", "words"), COOKED_ERRORS)
def test_read_cooked_rejects_malformed_files(tmp_path, content, line, words):
    path = _write(tmp_path / "norway_bus_7.txt", content)
    with pytest.raises(TraceFileError) as info:
        read_cooked(path)
    message = str(info.value)
    assert str(path) in message and f"{path}:{line}:" in message
    assert "trace 'norway_bus_7'" in message and words in message
    assert "\n" not in message
    assert (info.value.line, info.value.trace_id) == (line, "norway_bus_7")


_FLOATS = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True, width=64)
_FORMATS = st.sampled_from(["{!r}", "{:.3f}", "{:.17g}", "{:e}", "{:.0f}", "{:+.5g}"])


@pytest.mark.filterwarnings("ignore:overflow encountered in subtract:RuntimeWarning")
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_FLOATS, _FLOATS, _FORMATS), min_size=1, max_size=30),
       st.sampled_from([" ", "\t"]), st.sampled_from(["\n", "\r\n", "\r"]),
       st.sampled_from(["", "# t bw", "  # header", "\n"]))
def test_fast_cooked_parser_is_bit_identical_to_the_line_reader(rows, sep, newline, extra):
    lines = [f"{fmt.format(a)}{sep}{fmt.format(b)}" for a, b, fmt in rows]
    text = newline.join([extra, *lines] if extra else lines) + newline
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder) / "f.txt", "")
        path.write_bytes(text.encode())
        assert _is_fast(path)
        assert _outcome(read_cooked, path, True) == _outcome(read_cooked, path, False)


_TRICKY = st.lists(st.sampled_from(list("0123456789.+-eE \t\n\r#x_") + [
    "nan", "inf", "\x0b", "\x0c", "\x1e", "\u0085", "\u2028", "\u00e9", "1e400", "\r\n",
    "# c", "nan(1)"]), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(_TRICKY)
def test_both_readers_agree_on_any_text_result_or_exact_error(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.y"
        path.write_bytes(text.encode())
        assert _outcome(read_cooked, path, True) == _outcome(read_cooked, path, False)
        assert (_outcome(read_mahimahi, path, True, bin_s=0.01)
                == _outcome(read_mahimahi, path, False, bin_s=0.01))


def test_a_large_repr_file_parses_fast_and_bit_identical(tmp_path):
    rng = np.random.default_rng(11)
    t = np.cumsum(rng.exponential(1.0, 200_000)) * rng.choice([1e-3, 1.0, 1e3])
    bw = rng.lognormal(0, 3, 200_000)
    bw[rng.integers(0, len(bw), 50)] = 0.0
    path = write_cooked(tmp_path / "big.txt", t, bw)
    assert _is_fast(path)
    fast = read_cooked(path)
    assert _outcome(read_cooked, path, True) == _outcome(read_cooked, path, False)
    assert fast.time.tobytes() == (t[:-1] - t[0]).tobytes()
    assert fast.bandwidth.tobytes() == bw[1:].tobytes() and fast.period == t[-1] - t[0]


def test_errors_in_fast_parsed_files_name_the_right_line(tmp_path):
    cooked = _write(tmp_path / "c.txt", "# t bw\n0 1\n\n  # note\n1 2\n1 3\n")
    assert _is_fast(cooked)
    with pytest.raises(TraceFileError) as info:
        read_cooked(cooked)
    assert str(info.value) == (f"{cooked}:6: trace 'c': time does not increase (cooked times "
                               "must strictly increase)")
    stamps = _write(tmp_path / "m.down", "0\r\n# c\r\n5\r\n\r\n3\r\n")
    assert _is_fast(stamps, cooked=False)
    with pytest.raises(TraceFileError) as info:
        read_mahimahi(stamps)
    assert str(info.value) == (f"{stamps}:5: trace 'm': timestamp 3 ms is smaller than the one "
                               "before (timestamps must not decrease)")
    zero = _write(tmp_path / "z", "0\n\n0\n# end\n")
    with pytest.raises(TraceFileError) as info:
        read_mahimahi(zero)
    assert str(info.value) == (f"{zero}:3: trace 'z': zero period: the last timestamp (the loop "
                               "period) is 0 ms")


def test_not_plain_files_take_the_line_reader_with_the_same_result(tmp_path):
    cases = {"tabs_and_spaces": "0 1\n1\t2\n", "trailing_space": "0 1 \n1 2\n",
             "comment_after_data": "0 1\n1 2 # x\n", "form_feed": "0 1\n1 2\x0c3 4\n",
             "break_in_comment": "0 1\n# a\u20281 2\n3 4\n", "underscore": "0 1\n1_0 2\n",
             "hex_stamps": "0x10\n"}
    for name, text in cases.items():
        path = _write(tmp_path / name, text)
        assert not _is_fast(path) and not _is_fast(path, cooked=False)
        assert _outcome(read_cooked, path, True) == _outcome(read_cooked, path, False)
        assert (_outcome(read_mahimahi, path, True) == _outcome(read_mahimahi, path, False))
    assert read_cooked(tmp_path / "underscore").time.tolist() == [0.0]  # float("1_0") == 10
    with pytest.raises(TraceFileError, match="'0x10' is not an integer millisecond timestamp"):
        read_mahimahi(tmp_path / "hex_stamps")


# ---------------------------------------------------------------------------------------
# Mahimahi
# ---------------------------------------------------------------------------------------

def test_mahimahi_single_line_one_is_12_mbps(tmp_path):
    trace = read_mahimahi(_write(tmp_path / "const", "1\n"))
    np.testing.assert_array_equal(trace.time, [0.0])
    np.testing.assert_array_equal(trace.bandwidth, [12.0])
    assert trace.period == 0.001


def test_mahimahi_bins_and_the_period_boundary(tmp_path):
    # P = 250 ms; the timestamp 250 is the next loop's 0, so bin 0 holds 0, 0, 5 and 250
    trace = read_mahimahi(_write(tmp_path / "m", "0\n0\n5\n150\n150\n250\n"), bin_s=0.1)
    np.testing.assert_array_equal(trace.time, [0.0, 0.1, 0.2])
    np.testing.assert_array_equal(trace.bandwidth, [4 * 12 / 100, 2 * 12 / 100, 0.0])
    assert trace.period == 0.25
    width_s = np.diff(np.append(trace.time, trace.period))
    assert np.sum(trace.bandwidth * width_s) * 1e6 / 8 == pytest.approx(6 * 1500, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=200),
       st.sampled_from([0.001, 0.01, 0.1, 0.5, 1.0]))
def test_mahimahi_one_period_carries_every_line_once(stamps, bin_s):
    stamps = sorted(stamps)
    assume(stamps[-1] > 0)
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder) / "trace", "".join(f"{s}\n" for s in stamps))
        trace = read_mahimahi(path, bin_s=bin_s)
    width_ms = np.diff(np.append(trace.time, trace.period)) * 1000
    assert np.all(np.diff(trace.time) > 0) and np.all(width_ms > 0)
    packets = trace.bandwidth * width_ms / 12
    np.testing.assert_allclose(packets, np.round(packets), atol=1e-9)
    assert int(np.round(packets).sum()) == len(stamps)
    assert trace.period == stamps[-1] / 1000


def test_cooked_to_mahimahi_round_trip_within_one_packet_per_bin(tmp_path):
    rng = np.random.default_rng(3)
    bw = np.round(rng.uniform(0, 20, 61), 3)
    bw[[5, 6, 30]] = 0.0
    cooked = read_cooked(write_cooked(tmp_path / "c.txt", np.arange(61.0), bw))
    mm = read_mahimahi(write_mahimahi(tmp_path / "c.mm", *cooked), bin_s=1.0)
    np.testing.assert_array_equal(mm.time, cooked.time)
    assert mm.period == cooked.period
    packets_per_bin = 1000 / 12  # one Mbit/s over a 1 s bin, in 1500-byte packets
    assert np.max(np.abs(mm.bandwidth - cooked.bandwidth) * packets_per_bin) <= 1 + 1e-9


def test_mahimahi_read_write_at_1ms_bins_keeps_every_timestamp(tmp_path):
    stamps = [0, 0, 5, 150, 150, 151, 250]
    trace = read_mahimahi(_write(tmp_path / "m", "".join(f"{s}\n" for s in stamps)), bin_s=0.001)
    written = [int(s) for s in write_mahimahi(tmp_path / "m2", *trace).read_text().split()]
    assert written[-1] == 250  # the period is kept
    assert sorted(s % 250 for s in written) == sorted(s % 250 for s in stamps)
    assert write_mahimahi(tmp_path / "one", [0.0], [12.0], 0.001).read_text() == "1\n"


MAHIMAHI_ERRORS = [
    ("1\n2.5\n", 2, "not an integer"),
    ("1\nabc\n", 2, "not an integer"),
    ("5\n7\n3\n", 3, "smaller than the one before"),
    ("-1\n3\n", 1, "negative"),
    ("", 1, "empty"),
    ("0\n0\n", 2, "zero period"),
]


@pytest.mark.parametrize(("content", "line", "words"), MAHIMAHI_ERRORS)
def test_read_mahimahi_rejects_malformed_files(tmp_path, content, line, words):
    path = _write(tmp_path / "att.lte.down", content)
    with pytest.raises(TraceFileError) as info:
        read_mahimahi(path)
    message = str(info.value)
    assert f"{path}:{line}:" in message and "trace 'att.lte'" in message
    assert words in message and "\n" not in message


def test_mahimahi_bin_must_be_whole_milliseconds(tmp_path):
    path = _write(tmp_path / "m", "1\n")
    with pytest.raises(ValueError, match="whole number of milliseconds"):
        read_mahimahi(path, bin_s=0.0005)


def test_load_traces_mahimahi_directory_passes_bin_s(tmp_path):
    _write(tmp_path / "a", "1\n2\n")
    _write(tmp_path / "b", "10\n")
    traces = load_traces(tmp_path, "mahimahi", "all", bin_s=0.001)
    np.testing.assert_array_equal(traces.lengths, [2, 10])
    assert traces.meta["bin_s"] == 0.001 and traces.meta["format"] == "mahimahi"


# ---------------------------------------------------------------------------------------
# Puffer
# ---------------------------------------------------------------------------------------

def _csv_rows(folder: Path, kind: str) -> list[dict[str, str]]:
    with open(folder / f"{kind}_{folder.name}.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _edit_csv(folder: Path, kind: str, edit) -> None:
    path = folder / f"{kind}_{folder.name}.csv"
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    rows = edit(rows)
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows(rows)


def _stream_chunks(folder: Path, sid: str) -> list[tuple[dict, dict]]:
    """(video_sent row, video_acked row) of one stream, in video_ts order."""
    acked = {r["video_ts"]: r for r in _csv_rows(folder, "video_acked")
             if f"{r['session_id']}-{r['index']}" == sid}
    sent = [r for r in _csv_rows(folder, "video_sent") if f"{r['session_id']}-{r['index']}" == sid]
    return [(r, acked[r["video_ts"]]) for r in sorted(sent, key=lambda r: int(r["video_ts"]))]


def _stream_ids(folder: Path) -> list[str]:
    return list(dict.fromkeys(f"{r['session_id']}-{r['index']}"
                              for r in _csv_rows(folder, "video_sent")))


@pytest.fixture
def puffer_day(tmp_path) -> Path:
    return write_puffer_sample(tmp_path / "puffer", n_streams=4, n_chunks=[100, 120, 90, 60],
                               seed=7)


def test_puffer_sample_round_trip(puffer_day):
    ids = _stream_ids(puffer_day)
    traces = load_puffer(puffer_day.parent)
    assert traces.trace_ids.tolist() == sorted(ids[:3])  # the 60-chunk stream is dropped
    assert traces.meta["cleaning"]["dropped_too_short"] == 1
    for row, sid in enumerate(traces.trace_ids):
        chunks = _stream_chunks(puffer_day, sid)
        n = traces.lengths[row]
        assert n == len(chunks)
        sent = np.array([int(s[ld._TIME]) for s, _ in chunks])
        transmit = np.array([(int(a[ld._TIME]) - int(s[ld._TIME])) / 1e9 for s, a in chunks])
        size = np.array([float(s["size"]) for s, _ in chunks])
        np.testing.assert_allclose(traces.bandwidth[row, :n], size * 8 / 1e6 / transmit,
                                   rtol=1e-12)
        rate = np.array([float(s["delivery_rate"]) * 8 / 1e6 for s, _ in chunks])
        np.testing.assert_allclose(traces.series["delivery_rate"][row, :n], rate, rtol=1e-12)
        np.testing.assert_allclose(traces.series["rtt"][row, :n],
                                   [float(s["rtt"]) / 1e6 for s, _ in chunks], rtol=1e-12)
        hold = np.clip(np.diff(sent - sent[0]) / 1e9, 1e-3, 20)
        np.testing.assert_allclose(traces.time[row, :n], np.r_[0, np.cumsum(hold)], atol=1e-9)
        assert traces.constants["period"][row] == pytest.approx(traces.time[row, n - 1] + 1)
    assert traces.labels.tolist() == ["slow" if i % 2 == 0 else "fast" for i in
                                      sorted(range(3), key=lambda i: ids[i])]
    assert traces.meta["units"]["chunk_sizes"] == "MB"
    assert set(traces.meta["files"].values()) == {f"{puffer_day.name}/video_sent_"
                                                  f"{puffer_day.name}.csv"}


def test_puffer_encodings_follow_the_action_lookup(puffer_day):
    traces = load_puffer(puffer_day.parent)
    sizes = {(r["channel"], r["video_ts"], r["format"]): float(r["size"])
             for r in _csv_rows(puffer_day, "video_size")}
    ssims = {(r["channel"], r["video_ts"], r["format"]): float(r["ssim_index"])
             for r in _csv_rows(puffer_day, "ssim")}
    for row, sid in enumerate(traces.trace_ids):
        for j in (0, 1, traces.lengths[row] - 1):
            sent = _stream_chunks(puffer_day, sid)[j][0]
            keys = [(sent["channel"], sent["video_ts"], f) for f in PUFFER_FORMATS[sent["channel"]]]
            np.testing.assert_allclose(traces.chunks["chunk_sizes"][row, j],
                                       [sizes[k] / 1e6 for k in keys], rtol=1e-12)
            want = [-10 * np.log10(1 - ssims[k]) for k in keys]
            np.testing.assert_allclose(traces.chunks["ssim_db"][row, j], want, rtol=1e-12)
    assert traces.chunks["chunk_sizes"].shape[2] == 10
    assert np.all(np.diff(traces.chunks["chunk_sizes"][0, 0]) > 0)  # lowest quality first


def test_puffer_drops_a_row_with_a_negative_size(puffer_day):
    sid = sorted(_stream_ids(puffer_day)[:3])[0]
    before = load_puffer(puffer_day.parent)
    victim = _stream_chunks(puffer_day, sid)[10][0]

    def edit(rows):
        col = rows[0].index("size")
        for r in rows[1:]:
            if r[rows[0].index(ld._TIME)] == victim[ld._TIME]:
                r[col] = "-5"
        return rows

    _edit_csv(puffer_day, "video_sent", edit)
    after = load_puffer(puffer_day.parent)
    row = after.trace_ids.tolist().index(sid)
    assert after.lengths[row] == before.lengths[row] - 1
    assert np.all(after.bandwidth[row, :after.lengths[row]] > 0)


def test_puffer_malformed_value_names_file_line_and_stream(puffer_day):
    sid = _stream_ids(puffer_day)[1]

    def edit(rows):
        line = next(i for i, r in enumerate(rows) if f"{r[1]}-{r[2]}" == sid) + 5
        rows[line][rows[0].index("cwnd")] = "abc"
        return rows

    _edit_csv(puffer_day, "video_sent", edit)
    line = next(i for i, r in enumerate(_csv_rows(puffer_day, "video_sent"))
                if r["cwnd"] == "abc") + 2
    with pytest.raises(TraceFileError) as info:
        load_puffer(puffer_day.parent)
    message = str(info.value)
    assert f"video_sent_{puffer_day.name}.csv:{line}:" in message
    assert f"trace '{sid}'" in message and "'abc'" in message and "cwnd" in message
    assert "\n" not in message


def test_puffer_missing_column_and_missing_file(puffer_day):
    _edit_csv(puffer_day, "ssim", lambda rows: [r[:-1] for r in rows])
    with pytest.raises(TraceFileError, match=r"ssim_.*\.csv:1: missing column\(s\) 'ssim_index'"):
        load_puffer(puffer_day.parent)
    (puffer_day / f"video_acked_{puffer_day.name}.csv").unlink()
    with pytest.raises(TraceFileError, match="video_acked_.*missing"):
        load_puffer(puffer_day.parent)


def _inject_buffer_event(folder: Path, sid: str, chunk: int, buffer: float, cum_rebuf: float):
    """Add a client_buffer event 1 ms after the ack of ``chunk`` of stream ``sid``."""
    sent, acked = _stream_chunks(folder, sid)[chunk]
    row = [int(acked[ld._TIME]) + 10**6, sent["session_id"], sent["index"], sent["expt_id"],
           sent["channel"], "rebuffer", buffer, cum_rebuf]
    _edit_csv(folder, "client_buffer", lambda rows: rows + [[str(v) for v in row]])


def test_puffer_client_buffer_rules_drop_and_truncate(puffer_day):
    dropped, cut, kept = sorted(_stream_ids(puffer_day)[:3])
    _inject_buffer_event(puffer_day, dropped, 50, buffer=12.0, cum_rebuf=0.9)  # stall, buffer 15 s
    _inject_buffer_event(puffer_day, cut, 87, buffer=1.0, cum_rebuf=1.5)  # 1 s stall in 1 ms
    traces = load_puffer(puffer_day.parent)
    assert dropped not in traces.trace_ids
    assert traces.meta["cleaning"]["dropped_by_client_buffer"] == 1
    assert traces.lengths[traces.trace_ids.tolist().index(cut)] == 88  # chunks 0..87 stay
    assert kept in traces.trace_ids
    (puffer_day / f"client_buffer_{puffer_day.name}.csv").unlink()  # optional file: no rules
    assert {dropped, cut, kept} <= set(load_puffer(puffer_day.parent).trace_ids.tolist())


def test_buffer_limit_low_buffer_and_startup_rules():
    s = np.arange(31) * 10**9
    buffer = np.r_[10.0, 10.0, np.full(29, 0.1)]
    flat, no_init = np.zeros(31), np.zeros(31, bool)
    sent = s + 5 * 10**8
    # buffer below 0.3 s from t = 2 s: the event at 23 s is > 20 s later, truncate before it
    assert ld._buffer_limit(s, buffer, flat, no_init, sent) == 21 * 10**9 + 5 * 10**8
    calm = np.full(31, 10.0)
    assert ld._buffer_limit(s, calm, flat, no_init, sent) == sent[-1]
    # start-up exclusion: only init events before the last chunk -> invalid
    assert ld._buffer_limit(s, calm, flat, np.ones(31, bool), sent) is None
    # the stall total ends below its start-up value -> invalid
    assert ld._buffer_limit(s, calm, np.r_[0.5, np.zeros(30)], no_init, sent) is None
    assert ld._buffer_limit(s[:1], calm[:1], flat[:1], no_init[:1], sent) is None


def test_puffer_scheme_filter(puffer_day):
    ids = _stream_ids(puffer_day)
    only_bba = load_puffer(puffer_day.parent, schemes={"linear_bba": ["cubic"]})
    assert only_bba.trace_ids.tolist() == [ids[1]]
    fugu = load_puffer(puffer_day.parent, schemes={"puffer_ttp_cl": {"cc": ["bbr"]}})
    assert fugu.trace_ids.tolist() == sorted([ids[0], ids[2]])
    assert set(fugu.meta["schemes"].values()) == {"puffer_ttp_cl/bbr"}
    with pytest.raises(TraceFileError, match="no Puffer stream survived"):
        load_puffer(puffer_day.parent, schemes={"linear_bba": ["bbr"]})


def test_puffer_day_folders_form_one_dataset(tmp_path):
    write_puffer_sample(tmp_path / "a", n_streams=2, n_chunks=90, seed=1, day="2021-04-01")
    write_puffer_sample(tmp_path / "b", n_streams=2, n_chunks=90, seed=1, day="2021-04-02")
    traces = load_puffer(tmp_path)
    assert len(traces) == 4
    first = traces.trace_ids[0]
    assert f"{first}_1" in traces.trace_ids  # the same stream id on two days stays apart
    assert len(set(traces.meta["files"].values())) == 2


def test_puffer_split_through_load_traces(tmp_path):
    write_puffer_sample(tmp_path, n_streams=6, n_chunks=90, seed=2)
    every = load_traces(tmp_path, "puffer", "all")
    test_ids = [t for t in every.trace_ids if in_test_split(t)]
    line = describe_split(tmp_path, "puffer")
    assert line == f"split of {tmp_path}: {ld.HASH_RULE} -> test ({len(test_ids)} of 6 traces)"
    if test_ids:
        assert load_traces(tmp_path, "puffer", "test").trace_ids.tolist() == test_ids


# ---------------------------------------------------------------------------------------
# datasets and splits
# ---------------------------------------------------------------------------------------

def test_folder_split_rule(tmp_path):
    for name in ("a", "b", "c"):
        _write(tmp_path / "train" / f"{name}.txt", "0 1\n1 2\n")
    _write(tmp_path / "test" / "d.txt", "0 1\n2 3\n")
    train = load_traces(tmp_path, "cooked", "train")
    assert train.trace_ids.tolist() == ["train/a", "train/b", "train/c"]
    assert load_traces(tmp_path, "cooked", "test").trace_ids.tolist() == ["test/d"]
    every = load_traces(tmp_path, "cooked", "all", name="mine")
    assert len(every) == 4 and every.name == "mine"
    assert every.meta["split_rule"] == "train/ and test/ folders"
    assert describe_split(tmp_path, "cooked") == (
        f"split of {tmp_path}: train/ and test/ folders (3 / 1 traces)")


def test_hash_split_is_deterministic_and_ignores_file_order(tmp_path):
    names = [f"trace_{k:03d}" for k in range(200)]
    for folder, order in (("one", names), ("two", names[::-1])):
        for name in order:
            _write(tmp_path / folder / name, "0 1\n1 2\n")
    tests = [load_traces(tmp_path / f, "cooked", "test").trace_ids.tolist() for f in ("one", "two")]
    assert tests[0] == tests[1] == [n for n in names if in_test_split(n)]
    assert 0.12 < len(tests[0]) / 200 < 0.28
    train = load_traces(tmp_path / "one", "cooked", "train").trace_ids.tolist()
    assert sorted(train + tests[0]) == names
    assert describe_split(tmp_path / "one", "cooked") == (
        f"split of {tmp_path / 'one'}: sha256(trace id) % 100 < 20 -> test "
        f"({len(tests[0])} of 200 traces)")


def test_one_file_dataset_and_empty_split(tmp_path):
    name = _names(1, test=False)[0]
    path = _write(tmp_path / f"{name}.txt", "0 1\n1 2\n")
    assert load_traces(path, "cooked", "train").trace_ids.tolist() == [name]
    assert load_traces(path, "cooked", "all").meta["files"] == {name: f"{name}.txt"}
    with pytest.raises(TraceFileError, match="split 'test' is empty"):
        load_traces(path, "cooked", "test")


def test_directory_skips_hidden_files_and_readmes(tmp_path):
    _write(tmp_path / "sub" / "x.log", "0 1\n1 2\n")
    _write(tmp_path / ".hidden", "junk")
    _write(tmp_path / ".git" / "config", "junk")
    _write(tmp_path / "README.md", "about these traces")
    assert load_traces(tmp_path, "cooked", "all").trace_ids.tolist() == ["sub/x"]


def test_a_bad_file_in_a_directory_fails_the_load(tmp_path):
    _write(tmp_path / "good", "0 1\n1 2\n")
    bad = _write(tmp_path / "bad", "0 1\n1 oops\n")
    with pytest.raises(TraceFileError, match=f"{bad}:2: trace 'bad'"):
        load_traces(tmp_path, "cooked", "all")


def test_arguments_and_missing_paths(tmp_path):
    with pytest.raises(ValueError, match="unknown trace format"):
        load_traces(tmp_path, "xyz", "train")
    with pytest.raises(ValueError, match="unknown split"):
        load_traces(tmp_path, "cooked", "val")
    with pytest.raises(TraceFileError, match="no such file"):
        load_traces(tmp_path / "nope", "cooked", "all")
    with pytest.raises(TraceFileError, match="no trace files"):
        load_traces(tmp_path, "cooked", "all")
    assert TRACE_FORMATS == ("cooked", "mahimahi", "puffer", "npz", "csv")


# ---------------------------------------------------------------------------------------
# non-trace files and the padding cap
# ---------------------------------------------------------------------------------------

def test_extension_rule_skips_non_trace_files_logs_them_once_and_counts_alike(tmp_path, caplog):
    for name in ("a.txt", "b.log", "trace_1_http---www.youtube.com", "page.html", "sub/c"):
        _write(tmp_path / name, "0 1\n1 2\n")
    for name in ("meta.json", "notes.md", "plot.PNG", "sub/cfg.yaml", "data.tar.gz"):
        _write(tmp_path / name, "{not a trace}")
    with caplog.at_level(logging.INFO, logger="plume"):
        traces = load_traces(tmp_path, "cooked", "all")
    assert traces.trace_ids.tolist() == ["a", "b", "page", "sub/c", "trace_1_http---www.youtube"]
    skipped = ["data.tar.gz", "meta.json", "notes.md", "plot.PNG", "sub/cfg.yaml"]
    assert traces.meta["skipped_files"] == skipped
    rule = "known non-trace extensions: " + " ".join(sorted(ld.NON_TRACE_SUFFIXES))
    assert [r.getMessage() for r in caplog.records if r.name == "plume"] == [
        f"skipped 5 non-trace file(s) in {tmp_path}: {', '.join(skipped)} ({rule})"]
    n_test = sum(map(in_test_split, traces.trace_ids.tolist()))
    assert describe_split(tmp_path, "cooked") == (
        f"split of {tmp_path}: {ld.HASH_RULE} -> test ({n_test} of 5 traces)")


def test_csv_folders_read_only_csv_files_and_split_folders_merge_skips(tmp_path, caplog):
    from plume.traces.lb import write_lb_csv

    for part, name in (("train", "j1"), ("train", "j2"), ("test", "j3")):
        write_lb_csv(tmp_path / part / f"{name}.csv", [1, 2], [100, 200])
    _write(tmp_path / "train" / "notes.txt", "jobs of day 1")
    _write(tmp_path / "test" / "j3.json", "{}")
    with caplog.at_level(logging.INFO, logger="plume"):
        every = load_traces(tmp_path, "csv", "all")
    assert every.trace_ids.tolist() == ["train/j1", "train/j2", "test/j3"]
    assert every.meta["skipped_files"] == ["train/notes.txt", "test/j3.json"]
    logged = [r.getMessage() for r in caplog.records if r.name == "plume"]
    line = (f"skipped 2 non-trace file(s) in {tmp_path}: train/notes.txt, test/j3.json "
            "(a csv dataset reads only *.csv files)")
    assert logged == [line]
    assert load_traces(tmp_path, "csv", "test").meta["skipped_files"] == ["test/j3.json"]
    assert describe_split(tmp_path, "csv") == (
        f"split of {tmp_path}: train/ and test/ folders (2 / 1 traces)")


def test_a_folder_of_only_non_trace_files_says_so(tmp_path):
    _write(tmp_path / "meta.json", "{}")
    _write(tmp_path / "README", "about")
    with pytest.raises(TraceFileError) as info:
        load_traces(tmp_path, "mahimahi", "all")
    assert str(info.value) == (
        f"{tmp_path}: no trace files (every regular file below it is read, except hidden ones, "
        f"README* and, by extension, 1 skipped file(s); known non-trace extensions: "
        f"{' '.join(sorted(ld.NON_TRACE_SUFFIXES))})")
    single = load_traces(_write(tmp_path / "one.json", "0 1\n1 2\n"), "cooked", "all")
    assert single.trace_ids.tolist() == ["one"]  # a file named on its own is always read


def _refusal(path, tid: str, longest: int, n: int, width: int, bytes_per_sample: int,
             limit: int) -> str:
    cells = n * width
    return (f"{path}: trace '{tid}': {longest:,} samples, the longest of {n} traces; padding "
            f"every trace to {width:,} samples would take {n} x {width:,} = {cells:,} samples "
            f"per channel ({cells * bytes_per_sample / 2**30:.2f} GiB), over the limit of "
            f"{limit:,}: split or resample this trace, or raise the limit to at least "
            f"{cells:,} (env.max_padded_samples in plume-train, max_padded_samples= in "
            "load_traces)")


def test_padding_over_the_cap_is_refused_in_one_line_naming_the_longest_trace(tmp_path):
    for k in range(3):
        _write(tmp_path / f"s{k}.txt", "0 1\n1 2\n2 3\n")
    long = write_cooked(tmp_path / "long.txt", np.arange(11.0), np.ones(11))
    with pytest.raises(TraceFileError) as info:
        load_traces(tmp_path, "cooked", "all", max_padded_samples=39)
    assert str(info.value) == (
        f"{long}: trace 'long': 10 samples, the longest of 4 traces; padding every trace to 10 "
        "samples would take 4 x 10 = 40 samples per channel (0.00 GiB), over the limit of 39: "
        "split or resample this trace, or raise the limit to at least 40 "
        "(env.max_padded_samples in plume-train, max_padded_samples= in load_traces)")
    assert (info.value.path, info.value.line, info.value.trace_id) == (str(long), None, "long")
    assert load_traces(tmp_path, "cooked", "all", max_padded_samples=40).lengths.tolist() == [
        10, 2, 2, 2]
    assert len(load_traces(tmp_path, "cooked", "all", max_padded_samples=None)) == 4
    assert ld.MAX_PADDED_SAMPLES == 2**24
    slow = _write(tmp_path / "mm" / "slow.down", "1000\n")  # 10 bins of 0.1 s
    _write(tmp_path / "mm" / "fast.down", "100\n")
    with pytest.raises(TraceFileError) as info:
        load_traces(tmp_path / "mm", "mahimahi", "all", max_padded_samples=19)
    assert str(info.value) == _refusal(slow, "slow", 10, 2, 10, 16, 19)


def test_the_cap_guards_csv_npz_puffer_and_joined_split_folders(tmp_path):
    from plume.traces.lb import write_lb_csv

    lb = tmp_path / "lb"
    write_lb_csv(lb / "short.csv", [1, 1], [100, 100])
    long_jobs = write_lb_csv(lb / "long.csv", np.ones(700), np.full(700, 100.0))
    with pytest.raises(TraceFileError) as info:
        load_traces(lb, "csv", "all", max_jobs=None, max_padded_samples=1000)
    assert str(info.value) == _refusal(long_jobs, "long", 700, 2, 700, 16, 1000)

    _small_set(["a", "b"]).save(tmp_path / "npz" / "one.npz")
    wide = _small_set(["c"])
    wide = TraceSet(name="w", series={k: np.c_[v, v[:, -1:] + 1] for k, v in wide.series.items()},
                    constants=wide.constants, trace_ids=wide.trace_ids, meta=wide.meta)
    wide.save(tmp_path / "npz" / "two.npz")
    with pytest.raises(TraceFileError) as info:
        load_traces(tmp_path / "npz", "npz", "all", max_padded_samples=11)
    assert str(info.value) == _refusal(tmp_path / "npz", "c", 4, 3, 4, 16, 11)

    folder = tmp_path / "split"
    for name in ("a", "b", "c"):
        _write(folder / "train" / name, "0 1\n1 2\n2 3\n")
    test_file = write_cooked(folder / "test" / "d", np.arange(5.0), np.ones(5))
    assert len(load_traces(folder, "cooked", "train", max_padded_samples=6)) == 3
    with pytest.raises(TraceFileError) as info:
        load_traces(folder, "cooked", "all", max_padded_samples=15)
    assert str(info.value) == _refusal(test_file, "test/d", 4, 4, 4, 16, 15)

    day = write_puffer_sample(tmp_path / "puffer", n_streams=2, n_chunks=[100, 120])
    streams = load_puffer(tmp_path / "puffer", min_chunks=1)
    longest = int(np.argmax(streams.lengths))
    n_rows = int(streams.lengths[longest])
    with pytest.raises(TraceFileError) as info:
        load_traces(tmp_path / "puffer", "puffer", "all", min_chunks=1,
                    max_padded_samples=2 * n_rows - 1)
    sent = next(day.glob("video_sent_*.csv"))
    assert str(info.value) == _refusal(sent, streams.trace_ids[longest], n_rows, 2, n_rows,
                                       208, 2 * n_rows - 1)


# ---------------------------------------------------------------------------------------
# npz
# ---------------------------------------------------------------------------------------

def _small_set(ids: list[str], name: str = "s") -> TraceSet:
    n = len(ids)
    return TraceSet(name=name, series={"time": np.tile([0.0, 1.0, 2.0], (n, 1)),
                                       "bandwidth": np.arange(1.0, 3 * n + 1).reshape(n, 3)},
                    constants={"period": np.full(n, 3.0)}, trace_ids=np.array(ids),
                    meta={"units": {"bandwidth": "Mbit/s"}})


def test_npz_file_and_hash_split(tmp_path):
    ids = _names(3, test=False) + _names(2, test=True)
    path = _small_set(ids).save(tmp_path / "set.npz")
    every = load_traces(path, "npz", "all")
    assert every.content_hash == TraceSet.load(path).content_hash
    assert load_traces(path, "npz", "test").trace_ids.tolist() == ids[3:]
    assert load_traces(path, "npz", "train").trace_ids.tolist() == ids[:3]
    assert describe_split(path, "npz") == f"split of {path}: {ld.HASH_RULE} -> test (2 of 5 traces)"


def test_npz_train_and_test_files(tmp_path):
    _small_set(["a", "b"]).save(tmp_path / "train.npz")
    _small_set(["c"]).save(tmp_path / "test.npz")
    assert load_traces(tmp_path, "npz", "test").trace_ids.tolist() == ["c"]
    every = load_traces(tmp_path, "npz", "all")
    assert every.trace_ids.tolist() == ["a", "b", "c"] and every.meta["split"] == "all"
    assert describe_split(tmp_path, "npz") == (
        f"split of {tmp_path}: train.npz and test.npz files (2 / 1 traces)")


def test_npz_bad_file_message_names_the_file(tmp_path):
    bad = _write(tmp_path / "bad.npz", "not a zip archive")
    with pytest.raises(TraceFileError) as info:
        load_traces(bad, "npz", "all")
    message = str(info.value)
    assert message.startswith(f"{bad}: not a TraceSet .npz archive")
    assert message.count(str(bad)) == 1 and "\n" not in message
    np.savez(tmp_path / "keys.npz", lengths=np.ones(2))
    with pytest.raises(TraceFileError, match=r"keys\.npz: missing key 'header'"):
        load_traces(tmp_path / "keys.npz", "npz", "all")
