"""The run layer (plume/runs): the typed status record and its checked reader, and the one job
lifecycle that plume-train, plume-eval and plume-emulate hand their work to: a killed job reads
``interrupted`` everywhere, a second process on the same folder is refused in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plume.report.runs import read_run, scan_runs
from plume.runs import lifecycle
from plume.runs.lifecycle import JobRecord, Outcome, run_lifecycle
from plume.runs.record import (
    COMPLETED,
    FAILED,
    INTERRUPTED,
    RUNNING,
    STATES,
    Broken,
    RunStatus,
    read_status,
    run_state,
)
from plume.runs.store import RunDirectory

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_env"

# --------------------------------------------------------------------------- the record

names = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=20)
reals = st.floats(min_value=0, max_value=1e9, allow_nan=False)
records = st.builds(
    RunStatus, state=st.sampled_from(STATES), exp_name=st.none() | names,
    seed=st.none() | st.integers(-(2**63), 2**63 - 1),
    choices=st.dictionaries(names, st.none() | names, max_size=4),
    command=st.none() | st.text(max_size=50), elapsed_s=st.none() | reals,
    error=st.none() | st.text(max_size=50), host=st.none() | names,
    pid=st.none() | st.integers(1, 2**31 - 1), heartbeat=st.none() | reals,
    versions=st.dictionaries(names, names, max_size=3),
    resumes=st.lists(st.fixed_dictionaries({"from_env_steps": st.integers(0, 10**9)}),
                     max_size=2),
    summary=st.none() | st.dictionaries(names, reals, max_size=3),
    extra=st.dictionaries(names.map(lambda n: f"x_{n}"), st.integers(), max_size=2))


@settings(max_examples=200, deadline=None)
@given(records)
def test_the_status_record_round_trips_through_its_json(record):
    text = json.dumps(record.to_json())
    assert RunStatus.from_json(json.loads(text)) == record


DAMAGED = {
    "not an object": ([1, 2], "status.json: holds a list, not a JSON object"),
    "no state": ({"seed": 0}, "status.json: no state"),
    "unknown state": ({"state": "done"}, "status.json: unknown state 'done' (expected "
                      "completed, failed, running, paused or interrupted)"),
    "pid as text": ({"state": "running", "pid": "12"},
                    "status.json: pid is a string ('12'), not a process id"),
    "pid out of range": ({"state": "running", "pid": 0},
                         "status.json: pid 0 is out of range (1 to 2147483647)"),
    "seed as float": ({"state": "completed", "seed": 1.5},
                      "status.json: seed is a number (1.5), not a whole number"),
    "a name with a backtick": ({"state": "completed", "choices": {"env": "a`b"}},
                               "status.json: choices.env 'a`b' is not a plain name (one line of "
                               "at most 200 characters, none of ` < > [ ] | \\ $)"),
    "choices a list": ({"state": "completed", "choices": ["env"]},
                       "status.json: choices is a list, not a mapping"),
    "summary as text": ({"state": "completed", "summary": "good"},
                        "status.json: summary is a string, not a mapping"),
    "resumes not a list": ({"state": "completed", "resumes": {"at": 1}},
                           "status.json: resumes is a mapping, not a list"),
    "a resume not a mapping": ({"state": "completed", "resumes": [3]},
                               "status.json: resumes[0] is a number, not a mapping"),
    "heartbeat nan": ({"state": "running", "heartbeat": float("nan")},
                      "status.json: heartbeat is nan, not a finite number"),
    "elapsed negative": ({"state": "completed", "elapsed_s": -1},
                         "status.json: elapsed_s -1 is out of range (0 to 1e+15)"),
    "lateness verdict as text": ({"state": "completed", "link_lateness": {
        "within_tolerance": "yes"}}, "status.json: link_lateness.within_tolerance is a string "
                                     "('yes'), not true, false or null"),
    "lateness fraction above 1": ({"state": "completed", "link_lateness": {
        "late_fraction": 2}}, "status.json: link_lateness.late_fraction 2.0 is above 1"),
}


@pytest.mark.parametrize("name", DAMAGED)
def test_every_damaged_form_is_broken_with_its_reason(name, tmp_path):
    data, reason = DAMAGED[name]
    assert RunStatus.from_json(data) == Broken(reason, is_object=isinstance(data, dict))
    (tmp_path / "status.json").write_text(json.dumps(data))
    assert read_status(tmp_path) == Broken(reason, is_object=isinstance(data, dict))
    assert run_state(tmp_path) == "broken"
    (row,) = scan_runs([tmp_path]).runs.itertuples()
    assert (row.state, row.error) == ("broken", reason)


@pytest.mark.parametrize("content, reason", [
    (b"", "status.json: empty file"),
    (b"{\"state\": ", "status.json: not valid JSON (Expecting value: line 1, column 11)"),
    (b"\xff", "status.json: not UTF-8 text (byte 0xff at offset 0)"),
])
def test_an_unreadable_status_file_is_broken_and_not_an_object(content, reason, tmp_path):
    (tmp_path / "status.json").write_bytes(content)
    assert read_status(tmp_path) == Broken(reason, is_object=False)


def test_no_status_file_is_a_job_that_never_started(tmp_path):
    assert read_status(tmp_path) is None and run_state(tmp_path) is None
    assert not (tmp_path / "status.json").exists()


# --------------------------------------------------------------------------- the lifecycle


class _Tracker:
    location = None

    def __init__(self):
        self.finished: list[int] = []

    def finish(self, exit_code: int) -> None:
        self.finished.append(exit_code)


def _record(**fields) -> JobRecord:
    return JobRecord(exp_name="e", seed=3, choices={"env": "cc"}, config="a: 1\n", **fields)


def test_a_job_runs_as_running_with_its_process_then_completes(tmp_path, monkeypatch):
    monkeypatch.setattr(lifecycle, "HEARTBEAT_EVERY_S", 0.05)
    rundir, tracker, seen = RunDirectory(tmp_path), _Tracker(), []

    def body(given):
        first = rundir.status()
        time.sleep(0.4)
        seen.extend([first, rundir.status()])
        return Outcome({"score": 1.5})

    assert run_lifecycle(rundir, _record(), body, tracker=lambda: tracker) == {"score": 1.5}
    first, later = seen
    assert (first.state, first.pid, first.host) == (RUNNING, os.getpid(), os.uname().nodename)
    assert later.heartbeat > first.heartbeat  # the heartbeat thread beat during the body
    done = rundir.status()
    assert (done.state, done.summary, done.exp_name, done.seed) == (COMPLETED, {"score": 1.5},
                                                                     "e", 3)
    assert tracker.finished == [0] and (tmp_path / "config.yaml").read_text() == "a: 1\n"
    # typed again: skipped, the body never runs
    assert run_lifecycle(rundir, _record(), lambda t: 1 / 0) == {"score": 1.5}


def test_a_failing_body_is_recorded_failed_and_the_tracker_still_finishes(tmp_path):
    rundir, tracker = RunDirectory(tmp_path), _Tracker()

    def body(given):
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        run_lifecycle(rundir, _record(), body, tracker=lambda: tracker)
    status = rundir.status()
    assert (status.state, status.error) == (FAILED, "RuntimeError: a bug")
    assert "Traceback" in status.traceback and tracker.finished == [1]
    with pytest.raises(OSError, match="no tun"):  # a quiet error: its line, no traceback
        run_lifecycle(rundir, _record(quiet=(OSError,)), lambda t: (_ for _ in ()).throw(
            OSError("no tun")))
    assert rundir.status().traceback is None and rundir.status().error == "OSError: no tun"


# --------------------------------------------------------------------------- real commands

BLOCKING_ENV = """
import dataclasses, sys, time
sys.path.insert(0, {example!r})
import link_share

def _waits(params):
    def policy(obs):  # blocks until the test kills the job (bounded: 120 s)
        time.sleep(120)
        return obs[:, 0].astype(int) * 0
    return policy

SPEC = dataclasses.replace(link_share.SPEC, controllers={{"waits": _waits}})
"""


def _wait_for(root: Path, process: subprocess.Popen, state: str, timeout: float = 120):
    """The run directory under ``root`` once its status says ``state``, and that status."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for found in root.rglob("status.json"):
            status = read_status(found.parent)
            if isinstance(status, RunStatus) and status.state == state:
                return found.parent, status
        if process.poll() is not None:
            raise AssertionError(f"the job ended first: {process.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"no run under {root} read {state}")


def _killed_then_refused(command: list[str], root: Path, app: str, tmp_path: Path):
    """Start ``command``, see it running, refuse a second copy, SIGKILL the first; the report
    then lists the run as interrupted."""
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        run_dir, running = _wait_for(root, first, RUNNING)
        assert running.pid == first.pid
        second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert second.stderr.strip().splitlines() == [
            f"{app}: error: {run_dir} is in use by another process (pid {first.pid} on "
            f"{os.uname().nodename}): the same job is already running"]
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate(timeout=60)
    assert read_status(run_dir).state == RUNNING and run_state(run_dir) == INTERRUPTED
    report = subprocess.run([sys.executable, "-m", "plume.report.cli", str(run_dir),
                             "--out", str(tmp_path / "report"), "--no-figures"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert (row_state(report), read_run(run_dir).state) == (INTERRUPTED, INTERRUPTED)


def row_state(report: subprocess.CompletedProcess) -> str:
    """The state plume-report gives the one run: its list of unfinished runs (no completed
    run to pool), or the emulation table's problem column."""
    text = report.stdout + report.stderr
    table = Path(text.split("report: ")[-1].strip())
    if report.returncode == 0 and table.is_file():
        text = table.read_text()
    return INTERRUPTED if ("interrupted: " in text or "state interrupted |" in text) else text


def test_a_killed_plume_eval_reads_interrupted_and_a_second_one_is_refused(tmp_path):
    module = tmp_path / "waiting_env.py"
    module.write_text(textwrap.dedent(BLOCKING_ENV.format(example=str(EXAMPLE))))
    command = [sys.executable, "-m", "plume.harness.apps.evaluate",
               f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", "env=link_share",
               f"env.package={module}", "controller=waits", f"paths.root={tmp_path / 'runs'}",
               f"paths.cache={tmp_path / 'cache'}"]
    _killed_then_refused(command, tmp_path / "runs", "plume-eval", tmp_path)


@pytest.mark.skipif(__import__("plume.emulation", fromlist=["can_emulate"]).can_emulate()
                    is not None, reason="plume-emulate needs CAP_NET_ADMIN and /dev/net/tun")
def test_a_killed_plume_emulate_reads_interrupted_and_a_second_one_is_refused(tmp_path):
    command = [sys.executable, "-m", "plume.harness.apps.emulate", f"paths.root={tmp_path / 'runs'}",
               "exp_name=e", "env=abr", "env.variant=pensieve", "controller=bba",
               "emulation.traces=2", "emulation.parallel=1", "emulation.chunks=40"]
    _killed_then_refused(command, tmp_path / "runs", "plume-emulate", tmp_path)
