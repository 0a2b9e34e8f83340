"""Checked reading of the small JSON and YAML files of a run directory: every field a reader
takes is checked where it is read, and anything else is one :class:`RunFileError` line that
starts with the file's name and says what is wrong. The run record (``plume.runs.record``) and
the report (``plume.report.runs``) read through these, so both refuse a damaged file alike."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

#: Largest size (bytes) of a JSON or YAML run file: real ones are kilobytes (a status with a
#: long traceback, a few hundred); beyond this the file is taken as corrupt, not parsed.
TEXT_LIMIT = 16 * 2**20
#: Largest magnitude of a number read from a run (score, duration, step count): no real run
#: comes near, and tables print numbers in fixed notation.
LARGEST = 1e15
#: Seeds are stored as 64-bit integers; process ids are what ``os.kill`` accepts.
SEED_RANGE = (-(2**63), 2**63 - 1)
PID_RANGE = (1, 2**31 - 1)
#: A name (environment, dataset, algorithm, sampler, experiment, test set, kind) is one line
#: of at most NAME_LIMIT characters without these: names are printed in report sentences and
#: figure labels, where they could open code spans, HTML, links, table cells or mathtext.
NAME_LIMIT = 200
NAME_FORBIDS = "`<>[]|\\$"


class RunFileError(ValueError):
    """A file of one run directory is unreadable or malformed. The message is one line that
    starts with the file's name and says what is wrong."""


def regular_file(path: Path, name: str, limit: int | None = None) -> None:
    """RunFileError unless ``path`` is a regular file (not a directory, pipe or device, no
    dangling or looping link) of at most ``limit`` bytes."""
    try:
        info = path.stat()
    except OSError as err:
        raise RunFileError(f"{name}: cannot be read ({os_reason(err)})") from None
    if stat.S_ISDIR(info.st_mode):
        raise RunFileError(f"{name}: is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise RunFileError(f"{name}: is not a regular file")
    if limit is not None and info.st_size > limit:
        raise RunFileError(f"{name}: too large ({info.st_size} bytes; at most {limit})")


def read_text(path: Path, name: str) -> str:
    """The UTF-8 text of a small regular file that is not blank."""
    regular_file(path, name, TEXT_LIMIT)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise RunFileError(f"{name}: cannot be read ({os_reason(err)})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RunFileError(f"{name}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
                           f"{err.start})") from None
    if not text.strip():
        raise RunFileError(f"{name}: empty file")
    return text


def load_json(path: Path, name: str) -> Any:
    text = read_text(path, name)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise RunFileError(f"{name}: not valid JSON ({err.msg}: line {err.lineno}, column "
                           f"{err.colno})") from None
    except RecursionError:
        raise RunFileError(f"{name}: nested too deeply to parse") from None
    except ValueError as err:  # e.g. an integer with more digits than Python converts
        raise RunFileError(f"{name}: not valid JSON ({first_line(err)})") from None


def load_yaml(path: Path, name: str) -> Any:
    import yaml

    text = read_text(path, name)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise RunFileError(f"{name}: not valid YAML ({problem}{at})") from None
    except RecursionError:
        raise RunFileError(f"{name}: nested too deeply to parse") from None
    except (ValueError, OverflowError) as err:  # a tagged value YAML cannot build (a date)
        raise RunFileError(f"{name}: holds a value YAML cannot build ({first_line(err)})"
                           ) from None


def os_reason(err: OSError) -> str:
    return err.strerror or type(err).__name__


def first_line(err: BaseException, limit: int = 100) -> str:
    """'ArrowInvalid: Parquet magic bytes not found in footer': the error's type and first
    sentence, on one line, for a reason that stays short."""
    detail = " ".join(str(err).split()).split(". ")[0].rstrip(".")
    text = f"{type(err).__name__}: {detail}" if detail else type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def as_mapping(value: Any, where: str) -> dict[Any, Any]:
    """``value`` when it is a mapping, {} when absent (null)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RunFileError(f"{where} is {kind_of(value)}, not a mapping")
    return value


def as_name(value: Any, where: str) -> str | None:
    """A name (see NAME_FORBIDS), or None when absent."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise RunFileError(f"{where} is {kind_of(value)} ({shown(value)}), not a name")
    if (not value.strip() or value != value.strip() or len(value) > NAME_LIMIT
            or not value.isprintable() or any(ch in NAME_FORBIDS for ch in value)):
        raise RunFileError(f"{where} {shown(value)} is not a plain name (one line of at most "
                           f"{NAME_LIMIT} characters, none of {' '.join(NAME_FORBIDS)})")
    return value


def as_text(value: Any, where: str, limit: int | None = None) -> str | None:
    """Free text (escaped wherever it is printed), or None when absent."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise RunFileError(f"{where} is {kind_of(value)} ({shown(value)}), not text")
    if limit is not None and len(value) > limit:
        raise RunFileError(f"{where} is too long ({len(value)} characters; at most {limit})")
    return value


def as_whole(value: Any, where: str, bounds: tuple[int, int],
           what: str = "a whole number") -> int | None:
    """An integer within ``bounds``, or None when absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RunFileError(f"{where} is {kind_of(value)} ({shown(value)}), not {what}")
    if not bounds[0] <= value <= bounds[1]:
        raise RunFileError(f"{where} {shown(value)} is out of range ({bounds[0]} to "
                           f"{bounds[1]})")
    return value


def as_real(value: Any, where: str, *, low: float = -LARGEST, required: bool = False
          ) -> float | None:
    """A finite number in [low, LARGEST], or None when absent (unless ``required``)."""
    if value is None and not required:
        return None
    if value is None:
        raise RunFileError(f"{where} is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RunFileError(f"{where} is {kind_of(value)} ({shown(value)}), not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise RunFileError(f"{where} is {value!r}, not a finite number")
    if not low <= value <= LARGEST:
        raise RunFileError(f"{where} {shown(value)} is out of range ({low:g} to {LARGEST:g})")
    return float(value)


def kind_of(value: Any) -> str:
    """How a JSON/YAML value is named in a reason: 'a list', 'a string', 'null'."""
    if value is None:
        return "null"
    for types, name in ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"),
                        (dict, "a mapping"), (list, "a list")):
        if isinstance(value, types):
            return name
    return f"a {type(value).__name__}"


def shown(value: Any, limit: int = 40) -> str:
    """A short, one-line repr of a value for a reason (controls escaped)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def present(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}
