"""Reading line-oriented trace text: comment stripping, Arrow's fast column parser, line
numbers for error messages. Shared by the cooked and Mahimahi readers (and Puffer's
``expt_settings``), so every text format skips the same lines and words errors alike.

**Fast, exact parsing.** A plain cooked or Mahimahi file (ASCII; ``#`` only at the start
of a line; cooked rows ``<number><one space or tab><number>``, Mahimahi rows of digits) is
parsed by Arrow's C++ CSV reader, whose doubles are correctly rounded like Python's
``float``, so the arrays are bit-identical to the line-by-line reader's (9x faster and 4.5x
less memory on 10 million lines of 17-digit values, one CPU: benchmarks/
bench_traces.py). Anything else, and every error's wording, comes from the
line-by-line reader; line numbers of a fast-parsed file are found only when an error
needs one.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from plume.traces.traceset import TraceFileError


def _data_lines(path: Path, trace_id: str) -> list[tuple[int, str]]:
    """(1-based line number, stripped text) of every line that is not blank or a comment."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise TraceFileError(path, f"cannot be read as text ({err})", trace_id=trace_id) from None
    lines = ((n, s.strip()) for n, s in enumerate(text.splitlines(), 1))
    return [(n, s) for n, s in lines if s and not s.startswith("#")]


def _first_problem(path: Path, trace_id: str, lines: Sequence[int],
                   checks: Iterable[tuple[np.ndarray, str]], values: np.ndarray) -> None:
    """Raise for the first row of the first failing check (message may use ``{value}``)."""
    for bad, message in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise TraceFileError(path, message.format(value=values[i]), lines[i], trace_id)


_COMMENT_BYTES = bytes(range(0x20, 0x7F)) + b"\t"  # ASCII text: no other line breaks


def _fast_columns(path: Path, names: Sequence[str], kind: pa.DataType,
                  alphabet: bytes) -> list[np.ndarray] | None:
    """The columns of a plain file read by Arrow's C++ CSV reader, or None (not plain, or
    Arrow refuses a value) so that the line-by-line reader decides and words any error.

    Plain: ASCII, ``#`` only at line starts, data lines of ``alphabet`` and one separator (a
    space; a tab in a file without spaces). Arrow's fast_float doubles are correctly rounded,
    as Python's ``float`` is, so both readers return the same bits. One thread: it was the
    fastest on a busy 2-core machine, and a sweep's jobs already load side by side.
    """
    try:
        data = _without_comments(path.read_bytes())
    except OSError:
        return None
    if data is None:
        return None
    sep = b"," if len(names) == 1 else b"\t" if b" " not in data else b" "
    if data.translate(None, alphabet + sep):
        return None
    try:
        table = pcsv.read_csv(
            pa.BufferReader(data),
            read_options=pcsv.ReadOptions(column_names=list(names), use_threads=False),
            parse_options=pcsv.ParseOptions(delimiter=sep.decode(), quote_char=False,
                                            double_quote=False, escape_char=False,
                                            ignore_empty_lines=True),
            convert_options=pcsv.ConvertOptions(column_types=dict.fromkeys(names, kind),
                                                null_values=[], strings_can_be_null=False,
                                                quoted_strings_can_be_null=False))
    except pa.ArrowInvalid:
        return None
    arrays = [table.column(name).to_numpy() for name in names]  # one chunk: a read-only view
    return [a if a.flags.writeable else a.copy() for a in arrays]


_LINE_BREAK = re.compile(rb"[\r\n]")


def _without_comments(data: bytes) -> bytes | None:
    """``data`` with its ``#`` lines emptied, or None when a ``#`` follows data on a line or
    a comment holds more than ASCII text (other line breaks would split it for the line
    reader). Every search stays within the comment's line, never rescanning a large file."""
    pieces, start, at, has_lf = [], 0, data.find(b"#"), b"\n" in data
    while at >= 0:
        head = data.rfind(b"\n", 0, at) + 1 if has_lf else 0
        head = max(head, data.rfind(b"\r", head, at) + 1)
        if data[head:at].strip(b" \t"):
            return None
        pieces.append(data[start:head])
        end = _LINE_BREAK.search(data, at)
        start = end.start() if end else len(data)
        if data[at:start].translate(None, _COMMENT_BYTES):
            return None
        at = data.find(b"#", start)
    return b"".join([*pieces, data[start:]]) if pieces else data


class _LineNumbers(Sequence):
    """1-based line numbers of the data rows (not blank, not ``#``) of a fast-parsed file,
    found by reading it again only when an error message needs one: no per-line list."""

    def __init__(self, path: Path, n_rows: int) -> None:
        self.path, self.n_rows = path, n_rows

    def __len__(self) -> int:
        return self.n_rows

    def __getitem__(self, row: int) -> int:
        row = row + self.n_rows if row < 0 else row
        if not 0 <= row < self.n_rows:
            raise IndexError(row)
        with open(self.path, encoding="ascii") as handle:  # universal newlines = splitlines
            lines = (n for n, text in enumerate(handle, 1)
                     if text.strip() and not text.strip().startswith("#"))
            return next(itertools.islice(lines, row, None))
