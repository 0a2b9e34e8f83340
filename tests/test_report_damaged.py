"""A damaged run directory is listed as broken, never fatal, and run text is escaped.

One root holds six good completed runs, two failed runs whose error text and folder name try
Markdown/HTML/LaTeX injection, and one damaged run per case in ``DAMAGE`` (each a synthetic
run of ``tests.test_report.write_run`` with one file spoiled). The report must pool exactly the
good runs, list every damaged run as ``broken`` with a reason naming the file, and print run
text in report.md and the tables as literal text.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from plume.report import build_report
from plume.report.cli import main
from plume.report.tables import latex_escape as _latex_escape
from plume.report.tables import md_escape, plain_text
from plume.report.runs import scan_runs
from plume.report.stats import ReportStatsError
from tests.test_report import write_run

SETS = ("majority_slow",)
GOOD = {"uniform": range(3), "plume_dynamic": range(3)}
NAME_RULE = "(one line of at most 200 characters, none of ` < > [ ] | \\ $)"
INJECTION = ("Boom|INJ pipe\n# INJ heading\n`INJ code` <script>INJ</script> "
             "[INJ link](http://evil.example) *INJ* _INJ_ \x1b[31mINJ ~~INJ~~ &amp; $INJ$ "
             "100% {INJ} ^ \\INJ")
#: INJECTION as the failed-runs table prints it (whitespace collapsed, ESC shown, escaped).
INJECTION_MD = ("Boom\\|INJ pipe \\# INJ heading \\`INJ code\\` \\<script>INJ\\</script> "
                "[INJ link\\](http://evil.example) \\*INJ\\* \\_INJ\\_ \\\\x1b[31mINJ "
                "\\~\\~INJ\\~\\~ \\&amp; \\$INJ\\$ 100% {INJ} ^ \\\\INJ")
INJECTION_TEX = (r"Boom\textbar{}INJ pipe \# INJ heading `INJ code` \textless{}script"
                 r"\textgreater{}INJ\textless{}/script\textgreater{} {[}INJ link{]}"
                 r"(http://evil.example) *INJ* \_INJ\_ \textbackslash{}x1b{[}31mINJ "
                 r"\textasciitilde{}\textasciitilde{}INJ\textasciitilde{}\textasciitilde{} "
                 r"\&amp; \$INJ\$ 100\% \{INJ\} \textasciicircum{} \textbackslash{}INJ")
#: score.json of the good runs: the TraceBench anchors, a description with markup.
GOOD_SCORE = {"score": {"name": "qoe_per_chunk", "unit": "QoE per chunk"},
              "normalisation": {"description": "Floor *INJ* <b>x</b>\n# INJ [a](b)",
                                "test_sets": {"majority_slow": {"floor": 1.0, "ceiling": 6.0}}}}
GOOD_SCORE_MD = ("- `tracebench`: normalised score = (QoE per chunk - floor) / (ceiling - floor) "
                 "per test set (majority_slow: floor 1, ceiling 6). Floor \\*INJ\\* \\<b>x\\</b> "
                 "\\# INJ [a\\](b)")
#: A failed run's folder (its config_key) with markup in its name.
ODD_FOLDER = "sampler=uniform,note=<i>INJ|`x`"


def _status(run: Path, text: str) -> None:
    (run / "status.json").write_text(text)


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink()
    make(path)


def _config(run: Path, **changes) -> None:
    config = yaml.safe_load((run / "config.yaml").read_text())
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        if key:
            config[section][key] = value
        else:
            config[section] = value
    (run / "config.yaml").write_text(yaml.safe_dump(config))


def _eval(run: Path, change: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    table = pd.read_parquet(run / "eval.parquet")
    change(table).to_parquet(run / "eval.parquet", index=False)


def _score(run: Path, content) -> None:
    (run / "score.json").write_text(json.dumps(content))


def _running(**fields) -> str:
    return json.dumps({"state": "running", "host": socket.gethostname(),
                       "heartbeat": time.time(), "pid": os.getpid(), **fields})


def _set(column: str, value) -> Callable[[pd.DataFrame], pd.DataFrame]:
    return lambda table: table.assign(**{column: value})


def _first_row(column: str, value) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(table: pd.DataFrame) -> pd.DataFrame:
        table.loc[0, column] = value
        return table
    return change


def _anchors(floor, ceiling, test_set: str = "majority_slow") -> dict:
    return {"normalisation": {"test_sets": {test_set: {"floor": floor, "ceiling": ceiling}}}}


STATUS_DAMAGE = {
    "status_list": (lambda r: _status(r, "[1, 2]"),
                    "status.json: holds a list, not a JSON object"),
    "pid_abc": (lambda r: _status(r, _running(pid="abc")),
                "status.json: pid is a string ('abc'), not a process id"),
    "pid_zero": (lambda r: _status(r, _running(pid=0)),
                 "status.json: pid 0 is out of range (1 to 2147483647)"),
    "pid_huge": (lambda r: _status(r, _running(pid=10**30)),
                 ("status.json: pid 1000000000000000000000000000000 is out of range "
                 "(1 to 2147483647)")),
    "heartbeat_nan": (lambda r: _status(r, _running(heartbeat=float("nan"))),
                      "status.json: heartbeat is nan, not a finite number"),
    "heartbeat_text": (lambda r: _status(r, _running(heartbeat="soon")),
                       "status.json: heartbeat is a string ('soon'), not a number"),
    "status_deep": (lambda r: _status(r, "[" * 100_000 + "]" * 100_000),
                    "status.json: nested too deeply to parse"),
    "status_not_utf8": (lambda r: (r / "status.json").write_bytes(b'\xff{"state": 1}'),
                        "status.json: not UTF-8 text (byte 0xff at offset 0)"),
    "status_empty": (lambda r: _status(r, ""), "status.json: empty file"),
    "status_torn": (lambda r: _status(r, '{"state": "comp'),
                    ("status.json: not valid JSON (Unterminated string starting at: line 1, "
                    "column 11)")),
    "status_dir": (lambda r: _replace(r / "status.json", Path.mkdir),
                   "status.json: is a directory, not a file"),
    "status_loop": (lambda r: _replace(r / "status.json",
                                       lambda p: os.symlink("status.json", p)),
                    f"status.json: cannot be read ({os.strerror(errno.ELOOP)})"),
    "status_fifo": (lambda r: _replace(r / "status.json", os.mkfifo),
                    "status.json: is not a regular file"),
    "state_unknown": (lambda r: _status(r, '{"state": "done"}'),
                      ("status.json: unknown state 'done' (expected completed, failed, running, "
                      "paused or interrupted)")),
    "state_missing": (lambda r: _status(r, '{"error": null}'), "status.json: no state"),
    "elapsed_text": (lambda r: _status(r, '{"state": "completed", "elapsed_s": "1.5"}'),
                     "status.json: elapsed_s is a string ('1.5'), not a number"),
    "error_list": (lambda r: _status(r, '{"state": "failed", "error": ["a"]}'),
                   "status.json: error is a list (['a']), not text"),
}
CONFIG_DAMAGE = {
    "env_list": (lambda r: (r / "config.yaml").write_text("env: [1, 2]\n"),
                 "config.yaml: env is a list, not a mapping"),
    "config_list": (lambda r: (r / "config.yaml").write_text("- 1\n"),
                    "config.yaml: holds a list, not a YAML mapping"),
    "config_torn": (lambda r: (r / "config.yaml").write_text("env: [1, 2\n"),
                    ("config.yaml: not valid YAML (expected ',' or ']', but got '<stream end>' "
                    "at line 2)")),
    "config_deep": (lambda r: (r / "config.yaml").write_text("[" * 100_000),
                    "config.yaml: nested too deeply to parse"),
    "config_dir": (lambda r: _replace(r / "config.yaml", Path.mkdir),
                   "config.yaml: is a directory, not a file"),
    "seed_text": (lambda r: _config(r, seed="x"),
                  "config.yaml: seed is a string ('x'), not a whole number"),
    "seed_huge": (lambda r: _config(r, seed=10**30),
                  ("config.yaml: seed 1000000000000000000000000000000 is out of range "
                  "(-9223372036854775808 to 9223372036854775807)")),
    "sampler_markup": (lambda r: _config(r, sampler__name="[x](http://evil.example)"),
                       (f"config.yaml: sampler.name '[x](http://evil.example)' is not a plain "
                       f"name {NAME_RULE}")),
    "env_name_missing": (lambda r: (_config(r, env__name=None),
                                    _status(r, '{"state": "completed"}')),
                         ("config.yaml: no env.name (nor choices.env in status.json) for a "
                         "completed run")),
    "test_sets_numbers": (lambda r: _config(r, env__test_sets=[1, 2]),
                          ("config.yaml: env.test_sets is a list ([1, 2]), not a list of test "
                          "set names")),
    "steps_negative": (lambda r: _config(r, train__total_steps=-5),
                       ("config.yaml: train.total_steps -5 is out of range (0 to "
                       "9223372036854775807)")),
}
SCORE_DAMAGE = {
    "score_list": (lambda r: _score(r, [1]), "score.json: holds a list, not a JSON object"),
    "anchor_nan": (lambda r: _score(r, _anchors(float("nan"), 6.0)),
                   ("score.json: normalisation.test_sets.'majority_slow'.floor is nan, not a "
                   "finite number")),
    "anchor_text": (lambda r: _score(r, _anchors(1.0, "six")),
                    ("score.json: normalisation.test_sets.'majority_slow'.ceiling is a string "
                    "('six'), not a number")),
    "anchor_uncovered": (lambda r: _score(r, _anchors(1.0, 6.0, test_set="other")),
                         ("score.json: no floor and ceiling for test set(s) ['majority_slow'] "
                         "of eval.parquet")),
    "score_unit_dict": (lambda r: _score(r, {"score": {"unit": {"a": 1}}}),
                        "score.json: score.unit is a mapping ({'a': 1}), not text"),
}
EVAL_DAMAGE = {
    "eval_random": (lambda r: (r / "eval.parquet").write_bytes(
        np.random.default_rng(0).bytes(2000)),
        ("eval.parquet: not a readable Parquet file (ArrowInvalid: Parquet magic bytes not "
        "found in footer)")),
    "eval_empty_file": (lambda r: (r / "eval.parquet").write_bytes(b""),
                        ("eval.parquet: not a readable Parquet file (ArrowInvalid: Parquet file "
                        "size is 0 bytes)")),
    "eval_missing": (lambda r: (r / "eval.parquet").unlink(),
                     "status says completed but eval.parquet is missing"),
    "eval_dir": (lambda r: _replace(r / "eval.parquet", Path.mkdir),
                 "eval.parquet: is a directory, not a file"),
    "eval_no_progress": (lambda r: _eval(r, lambda t: t.drop(columns="progress")),
                         "eval.parquet: missing column(s) ['progress']"),
    "eval_no_rows": (lambda r: _eval(r, lambda t: t.iloc[:0]), "eval.parquet: no rows"),
    "progress_text": (lambda r: _eval(r, _set("progress", "half")),
                      "eval.parquet: column 'progress' holds object values, not numbers"),
    "progress_range": (lambda r: _eval(r, _set("progress", 1.5)),
                       "eval.parquet: progress 1.5 is outside [0, 1] (8 row(s))"),
    "progress_nan": (lambda r: _eval(r, _first_row("progress", np.nan)),
                     "eval.parquet: progress nan is outside [0, 1] (1 row(s))"),
    "score_huge": (lambda r: _eval(r, _set("return", 1e300)),
                   ("eval.parquet: score 1.0101010101010101e+298 is outside [-1e+15, 1e+15] "
                   "(8 row(s))")),
    "scoring_negative": (lambda r: _eval(r, _set("scoring_steps", -5.0)),
                         "eval.parquet: scoring_steps -5.0 is outside [0, 1e+15] (8 row(s))"),
    "label_markup": (lambda r: _eval(r, _set("label", "<b>INJ</b>")),
                     f"eval.parquet: label '<b>INJ</b>' is not a plain name {NAME_RULE}"),
    "test_set_missing": (lambda r: _eval(r, _first_row("test_set", None)),
                         "eval.parquet: column 'test_set' has missing values"),
}
DAMAGE = {**STATUS_DAMAGE, **CONFIG_DAMAGE, **SCORE_DAMAGE, **EVAL_DAMAGE}
FIRST_DAMAGED_SEED = 100


def _damaged_seeds() -> dict[str, int]:
    return {case: FIRST_DAMAGED_SEED + i for i, case in enumerate(DAMAGE)}


def _good(root: Path, sampler: str, seed: int, **kwargs) -> Path:
    return write_run(root, sampler, seed, n_traces=4, test_sets=SETS, progress=(0.0, 1.0),
                     **kwargs)


def damaged_root(root: Path) -> Path:
    """Six good runs, two failed runs with injected text, one damaged run per DAMAGE case."""
    for sampler, seeds in GOOD.items():
        for seed in seeds:
            _score(_good(root, sampler, seed), GOOD_SCORE)
    _good(root, "uniform", 7, state="failed", error=INJECTION)
    odd = _good(root, "uniform", 8, state="failed", error="ValueError: odd folder")
    (root / "synthetic" / ODD_FOLDER).mkdir()
    odd.rename(root / "synthetic" / ODD_FOLDER / odd.name)
    for case, seed in _damaged_seeds().items():
        damage, _ = DAMAGE[case]
        damage(_good(root, "uniform", seed))
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return damaged_root(tmp_path_factory.mktemp("damaged"))


@pytest.fixture(scope="module")
def report(root, tmp_path_factory):
    return build_report([root], tmp_path_factory.mktemp("report"), reps=50, figures=False)


def test_each_damaged_run_is_broken_with_a_reason_naming_its_file(root):
    runs = scan_runs(root).runs
    by_seed = runs.set_index("seed")
    for case, seed in _damaged_seeds().items():
        row = by_seed.loc[seed]
        assert (row["state"], row["error"]) == ("broken", DAMAGE[case][1]), case
        assert Path(row["run_dir"]).name == f"seed={seed}"
        assert row["sampler"] == "uniform", case  # the readable files still name the run
    assert runs["state"].value_counts().to_dict() == {"broken": len(DAMAGE), "completed": 6,
                                                      "failed": 2}


def test_the_good_runs_are_all_pooled(report):
    assert report.inventory.counts() == {"broken": len(DAMAGE), "completed": 6, "failed": 2}
    assert {name: len(runs) for name, runs in report.analysis.run_dirs.items()} == {
        "plume_dynamic": 3, "uniform": 3}
    assert report.analysis.seeds == [0, 1, 2]
    assert sorted(report.analysis.tasks) == ["fast_high-var", "fast_low-var", "slow_high-var",
                                             "slow_low-var"]
    assert set(report.tables["aggregates"]["n_runs"]) == {3}
    # the only note: 3 seeds are too few; no seed of a damaged run is reported missing
    assert report.analysis.notes == [
        ("Too few runs (3 per sampler; intervals and verdicts need 5, so 2 more): the report "
        "states point estimates only, no interval and no verdict.")]


def test_report_md_lists_each_broken_run_with_its_escaped_reason(report):
    text = report.report.read_text()
    listed = text.split("## Failed and unfinished runs (listed, not pooled)")[1].split("\n## ")[0]
    rows = [line for line in listed.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == len(DAMAGE) + 2
    for case, seed in _damaged_seeds().items():
        (row,) = [r for r in rows if f"seed={seed} |" in r]
        assert row.startswith("| broken | ") and f" | {md_escape(DAMAGE[case][1])} | " in row
    assert md_escape(DAMAGE["sampler_markup"][1]) == (
        "config.yaml: sampler.name '[x\\](http://evil.example)' is not a plain name (one line "
        "of at most 200 characters, none of \\` \\< > [ ] \\| \\\\ \\$)")


def test_report_md_shows_injected_text_literally(report):
    text = report.report.read_text()
    injected = [line for line in text.splitlines() if "INJ" in line]
    # the failed run's row, the odd folder's row, the label's reason, the normalisation
    assert len(injected) == 4
    assert GOOD_SCORE_MD in injected
    (row,) = [line for line in injected if "Boom" in line]
    assert row.startswith("| failed | uniform | 7 | ") and f" | {INJECTION_MD} | " in row
    (odd,) = [line for line in injected if "odd folder" in line]
    assert " | sampler=uniform,note=\\<i>INJ\\|\\`x\\` | ValueError: odd folder | " in odd
    for raw in ("<script>", "<b>", "<i>", "](http", "`INJ", "*INJ*", "~~", "$INJ", "&amp;",
                "\x1b"):
        assert not re.search(r"(?<!\\)" + re.escape(raw), text), raw
    assert not [line for line in text.splitlines() if line.startswith("#") and "INJ" in line]
    runs_md = (report.out / "tables" / "runs.md").read_text()
    assert f" | {INJECTION_MD} | " in runs_md


def _tex_residue(line: str) -> str:
    """What is left of a table row after removing every escape _latex_escape writes."""
    body = line.removesuffix(r" \\")
    escapes = (r"\\(textbackslash|textasciitilde|textasciicircum|textless|textgreater|"
               r"textbar)\{\}|\\[#$%&_{}]|\{[\[\]]\}|\$\\rightarrow\$")
    return re.sub(escapes, "", " ".join(body.split(" & ")))


def test_tex_tables_escape_every_special_character(report):
    rows = 0
    for path in sorted((report.out / "tables").glob("*.tex")):
        lines = path.read_text().splitlines()
        start, end = lines.index(r"\midrule"), lines.index(r"\bottomrule")
        for line in [lines[start - 1], *lines[start + 1:end]]:
            residue = _tex_residue(line)
            assert line.isascii() and not set(residue) & set("\\#$%&_{}~^<>|[]"), (path, line)
            rows += 1
    assert rows > 0
    tex = (report.out / "tables" / "runs.tex").read_text()
    (row,) = [line for line in tex.splitlines() if "Boom" in line]
    assert f" & {INJECTION_TEX} & " in row
    (odd,) = [line for line in tex.splitlines() if "odd folder" in line]
    assert r" & sampler=uniform,note=\textless{}i\textgreater{}INJ\textbar{}`x` & " in odd


def test_escapers_by_hand():
    assert plain_text("a\n\tb\u2028c \x1b[0m\u202e") == "a b c \\x1b[0m\\u202e"
    assert md_escape("snake_case _lead trail_ a*b <x> [t](u) [t][u] [t] | ` ~ & $ # \\") == (
        "snake_case \\_lead trail\\_ a\\*b \\<x> [t\\](u) [t\\][u] [t] \\| \\` \\~ \\& \\$ \\# "
        "\\\\")
    assert _latex_escape("x->y é 漢 [a] | 50% {b}") == (
        r"x$\rightarrow$y e ? {[}a{]} \textbar{} 50\% \{b\}")


def test_cli_reports_with_damaged_runs_without_a_traceback(root, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main([str(root), "--out", str(out), "--reps", "50", "--seed", "1"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err and captured.err == ""
    assert captured.out.startswith(
        f"pooled 6 completed runs (n = 3 runs per sampler, 4 compared task(s)); "
        f"{len(DAMAGE) + 2} failed/unfinished run(s) listed, not pooled\n")
    assert "\x1b" not in captured.out
    assert (out / "report.md").is_file() and (out / "figures" / "interval_estimates.png").is_file()


def test_a_root_of_only_damaged_runs_is_a_clear_error(tmp_path, capsys):
    for seed, case in enumerate(("status_list", "eval_random", "env_list")):
        DAMAGE[case][0](_good(tmp_path / "runs", "uniform", seed))
    with pytest.raises(ReportStatsError, match="no completed runs among the 3 run directories"):
        build_report([tmp_path / "runs"], tmp_path / "out", figures=False)
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n  broken: ") == 3 and f"({DAMAGE['env_list'][1]})" in err
