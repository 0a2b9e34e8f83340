"""One line for the rest (issue 34, item 6): a damaged Optuna journal, a search-space value no
trial could run, a full disk, and a folder given as a test set.

The full disk is real: a tmpfs of 1 MiB mounted in a private mount namespace
(``unshare -m --propagation private``: the host's mounts are never touched, the mount is gone
with the process), so the system's own ENOSPC is what the job meets; where that is not
available (no ``unshare``, not root) those tests are skipped, saying why. The file-size limit
(``RLIMIT_FSIZE``: EFBIG, not ENOSPC) checks that the line is the system's own reason.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd
import pytest

from plume.harness.config.errors import ConfigError
from plume.harness.integrations.tune import check_journal, search_space
from plume.traces import load_tracebench
from tests.conftest import TINY, plume_train_env
from tests.test_tune import search_command

pytestmark = pytest.mark.filterwarnings(
    "ignore:(?s).*is validated against ConfigStore schema:UserWarning")
ROOT = Path(__file__).resolve().parents[1]
CACHE = next(o for o in TINY if o.startswith("paths.cache="))
# One tiny job: 1,024 steps, evaluated at the start and the end.
TINY_JOB = ["logger=none", "train.total_steps=1024", "train.eval_points=1",
            "train.progress_every_s=0", "env.n_envs=8", "algo.n_steps=32",
            "algo.hidden_sizes=[16,16]", CACHE]


def digest(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path`` (or of the file): what "byte-identical" compares."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files}


def errors(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


# --- a damaged journal ----------------------------------------------------------------------


def write_journal(path: Path, n_trials: int = 2) -> bytes:
    """A real journal: Optuna's JournalFileBackend writing a study named like the search's."""
    from optuna.storages.journal import JournalFileBackend

    path.parent.mkdir(parents=True, exist_ok=True)
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    study = optuna.create_study(study_name="tune", storage=storage, direction="maximize")
    for value in range(n_trials):
        trial = study.ask()
        trial.suggest_float("algo.ent_coef", 0.0, 0.02)
        study.tell(trial, float(value))
    return path.read_bytes()


def test_a_torn_journal_is_refused_before_any_trial_and_never_written(tmp_path):
    journal = tmp_path / "runs" / "tune" / "optuna.journal"
    whole = write_journal(journal)
    n_lines = whole.count(b"\n")
    journal.write_bytes(whole[:-25])  # the last line torn by a kill mid-write
    before = digest(journal.parent)

    done = subprocess.run(search_command(tmp_path), capture_output=True, text=True,
                          env={**plume_train_env(), "PYTHONWARNINGS": "ignore"}, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert errors(done) == [(
        f"plume-train: error: {journal}:{n_lines}: damaged Optuna journal: line {n_lines} is "
        f"torn (no line break at its end: a write cut short); the sweeper has not written to "
        f"it: move it aside to start the study afresh, or keep its first {n_lines - 1} line(s) "
        f"to resume from what they record (head -n {n_lines - 1} {journal} > kept.journal; "
        f"mv kept.journal {journal})")]
    assert digest(journal.parent) == before  # the journal byte-identical, nothing added
    assert "trial" not in done.stdout


@pytest.mark.parametrize("damage, line, problem", [
    (lambda lines: [*lines[:3], b"hello world\n", *lines[3:]], 4, "is not JSON (Expecting value"),
    (lambda lines: [*lines[:2], bytes(range(128, 256)) + b"\n", *lines[2:]], 3,
     "is not text (not UTF-8)"),
    (lambda lines: [*lines[:1], b"\n", *lines[1:]], 2, "is empty"),
    (lambda lines: [*lines[:4], b'[1, 2]\n', *lines[4:]], 5,
     "is not an Optuna journal operation (no integer op_code)"),
    (lambda lines: [*lines[:2], b'{"op_code": 0, "worker_id": "w"}\n', *lines[2:]], 3,
     "cannot be replayed by Optuna (KeyError: 'study_name')"),
    (lambda lines: [b"\x00\x01garbage", *lines], 1, "is not JSON"),
    (lambda lines: [*lines[:2], b'{"op_code": ' + b"9" * 5000 + b"}\n", *lines[2:]], 3,
     "is not JSON (Exceeds the limit (4300 digits) for integer string conversion"),
    (lambda lines: [*lines[:2], b"[" * 30000 + b"\n", *lines[2:]], 3, "is not JSON ("),
])
def test_any_damaged_journal_line_is_named_read_only(tmp_path, damage, line, problem):
    journal = tmp_path / "optuna.journal"
    lines = write_journal(journal).splitlines(keepends=True)
    journal.write_bytes(b"".join(damage(lines)))
    before = journal.read_bytes()
    with pytest.raises(ConfigError) as err:
        check_journal(journal)
    message = str(err.value)
    assert message.startswith(f"{journal}:{line}: damaged Optuna journal: line {line} {problem}")
    assert "\n" not in message and "move it aside" in message
    assert ("keep its first" in message) == (line > 1)
    assert journal.read_bytes() == before
    check_journal(tmp_path / "absent.journal")  # no journal: a new study, nothing to check
    journal.write_bytes(b"".join(lines))
    check_journal(journal)  # the undamaged journal passes


# --- a search-space value no trial could run ------------------------------------------------


@pytest.mark.parametrize("space, message", [
    # the bad choice second: its trials would be refused one by one while the others run
    ("algo.network: {type: categorical, choices: [mlp, foo]}",
     ("hydra.sweeper.params.algo.network: choice foo is refused: algo: PPOConfig.network "
      "must be one of ['mlp', 'gelato', 'pensieve'], got 'foo'")),
    # the bad choice first (the probe job): still named; a preset without a config file
    ("algo: {type: categorical, choices: [nosuch, ppo]}",
     ("hydra.sweeper.params.algo: choice nosuch does not compose a job of this search: In "
      "'train': Could not find 'algo/nosuch'")),
])
def test_every_value_of_the_space_is_checked_before_the_first_trial(tmp_path, space, message):
    command = search_command(tmp_path)
    search = tmp_path / "conf" / "hparams_search" / "tiny.yaml"
    text = search.read_text()
    search.write_text(text.replace("      algo.learning_rate:", f"      {space}\n"
                                   "      algo.learning_rate:"))
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**plume_train_env(), "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(errors(done)) == 1 and errors(done)[0].startswith(f"plume-train: error: {message}")
    assert not (tmp_path / "runs").exists()  # no study, no run directory


def test_a_range_is_checked_at_both_of_its_reachable_ends():
    space = search_space({"algo.n_steps": {"type": "int", "low": 16, "high": 70, "step": 16},
                          "algo.gamma": {"type": "float", "low": 0.9, "high": 0.99},
                          "algo.ent_coef": {"type": "float", "low": 0.0, "high": 0.05,
                                            "step": 0.02},
                          "sampler": {"type": "categorical", "choices": ["uniform", "plr"]}})
    assert space["algo.n_steps"].ends() == [("low", 16), ("high", 64)]  # 70 is never drawn
    assert space["algo.gamma"].ends() == [("low", 0.9), ("high", 0.99)]
    assert space["algo.ent_coef"].ends() == [("low", 0.0), ("high", 0.04)]
    assert space["sampler"].ends() == [("choice", "uniform"), ("choice", "plr")]


# --- a full disk ----------------------------------------------------------------------------


def _private_namespace(tmp_path: Path) -> list[str]:
    """The ``unshare`` command that gives a private mount namespace where a tmpfs can be
    mounted (as root; else in a user namespace of one's own); skip when there is none."""
    probe = tmp_path / "probe"
    probe.mkdir()
    reasons = []
    for unshare in (["unshare", "-m", "--propagation", "private"],
                    ["unshare", "-r", "-m", "--propagation", "private"]):
        try:
            done = subprocess.run([*unshare, "mount", "-t", "tmpfs", "-o", "size=64k",
                                   "plume-test", str(probe)], capture_output=True, text=True,
                                  timeout=30)
        except FileNotFoundError:
            pytest.skip("no unshare(1): a full disk needs a private mount namespace")
        if done.returncode == 0:
            return unshare
        reasons.append(done.stderr.strip() or f"exit status {done.returncode}")
    pytest.skip(f"no private tmpfs here (unshare -m, mount -t tmpfs): {'; '.join(reasons)}")


def on_small_disk(tmp_path: Path, size: str, command: list[str], fill: bool = False):
    """Run ``command`` with ``tmp_path/disk`` (made here) a private tmpfs of ``size``
    (``fill``: filled to the brim first); what the disk held at the end is copied to
    ``tmp_path/after``."""
    unshare = _private_namespace(tmp_path)
    disk, after = tmp_path / "disk", tmp_path / "after"
    disk.mkdir()
    script = ('mount -t tmpfs -o size="$1" plume-test "$2" || exit 97; disk=$2; after=$3; '
              'shift 3; ' + ('dd if=/dev/zero of="$disk/.fill" bs=4k 2>/dev/null; ' if fill
                             else '') + '"$@"; rc=$?; rm -f "$disk/.fill"; '
              'cp -a "$disk" "$after"; exit $rc')
    done = subprocess.run([*unshare, "sh", "-c", script, "sh", size, str(disk), str(after),
                           *command], capture_output=True, text=True, env=plume_train_env(),
                          timeout=300)
    assert done.returncode != 97, done.stderr
    return done, after


def test_a_full_disk_during_a_checkpoint_is_one_line_and_a_failed_status(tmp_path):
    # 1 MiB holds the run's small files and its first evaluation, not its 2.6 MB checkpoint
    disk = tmp_path / "disk"
    done, after = on_small_disk(tmp_path, "1m", [
        sys.executable, "-m", "plume.harness.apps.train", f"paths.root={disk}",
        "env.test_sets=[majority_slow]", *TINY_JOB])
    runs = list(after.glob("default/*/seed=0"))
    assert len(runs) == 1, done.stderr[-3000:]
    written = disk / runs[0].relative_to(after) / "checkpoint.pt"
    assert done.returncode == 1
    assert errors(done) == [f"plume-train: error: no space left on device writing {written}"]
    assert "Traceback" not in done.stdout + done.stderr
    assert "Logging error" not in done.stdout + done.stderr
    status = json.loads((runs[0] / "status.json").read_text())
    assert status["state"] == "failed"
    assert status["error"] == f"WriteFailed: no space left on device writing {written}"
    names = {p.name for p in runs[0].iterdir()}
    assert "checkpoint.pt" not in names and not [n for n in names if n.endswith(".tmp")]
    assert {"eval.parquet", "config.yaml", "train.log"} <= names  # what fitted is kept


def test_the_job_log_says_once_that_its_disk_is_full(tmp_path, compose_cfg):
    handler = compose_cfg(hydra_cfg=True).hydra.job_logging.handlers.file
    assert handler["class"] == "plume.runs.store.RunLogHandler"  # Hydra's train.log
    log = tmp_path / "disk" / "train.log"
    code = ("import logging, sys\n"
            "from plume.runs.store import RunLogHandler\n"
            "logging.getLogger().addHandler(RunLogHandler(sys.argv[1]))\n"
            "for i in range(20):\n"
            "    logging.getLogger('plume').warning('record %d %s', i, 'x' * 5000)\n")
    done, after = on_small_disk(tmp_path, "64k", [sys.executable, "-c", code, str(log)],
                                   fill=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert errors(done) == [(f"no space left on device writing {log}: this log file stops "
                             "here (the console shows the rest)")]
    assert (after / "train.log").is_file()


def test_a_file_size_limit_is_the_systems_own_reason_and_nothing_is_left_torn(tmp_path):
    code = ("import resource, signal, sys\n"
            "import numpy as np\n"
            "from plume.runs.errors import WriteFailed\n"
            "from plume.runs.store import RunDirectory\n"
            "run = RunDirectory(sys.argv[1])\n"
            "(run.path / 'train.jsonl').write_text('{}\\n' * 33_000)\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))\n"
            "for write in (lambda: run.save_checkpoint({'env_steps': 1, 'w': np.zeros(10**6)}),\n"
            "              lambda: run.append_train({'env_steps': 2, 'pad': 'x' * 2000})):\n"
            "    try:\n"
            "        write()\n"
            "    except WriteFailed as err:\n"
            "        print(err)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        f"file too large writing {tmp_path / 'run' / 'checkpoint.pt'}",
        f"file too large writing {tmp_path / 'run' / 'train.jsonl'}"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["train.jsonl"]
    assert (tmp_path / "run" / "train.jsonl").read_text() == "{}\n" * 33_000  # cut back


# --- a folder given as a test set -----------------------------------------------------------


def test_a_folder_given_as_a_test_set_is_played_whole(tmp_path):
    folder = tmp_path / "slow142"
    folder.mkdir()
    load_tracebench("majority_slow", "test").subset(list(range(142))).save(folder / "slow.npz")
    before = digest(folder)
    done = subprocess.run([sys.executable, "-m", "plume.harness.apps.train",
                           f"paths.root={tmp_path / 'runs'}", f"env.test_sets=[{folder}]",
                           "env.trace_format=npz", *TINY_JOB], capture_output=True, text=True,
                          env=plume_train_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"test set {folder}: every trace in it (142 traces)" in done.stdout
    frame = pd.read_parquet(next((tmp_path / "runs").rglob("eval.parquet")))
    final = frame[frame["progress"] == 1.0]
    assert set(final["test_set"]) == {"slow142"} and len(final) == 142
    assert sorted(final["trace_id"]) == sorted(load_tracebench(
        "majority_slow", "test").trace_ids[:142])
    assert digest(folder) == before


def test_the_training_folder_named_as_a_test_set_plays_its_test_split(compose_cfg, tmp_path,
                                                                      caplog):
    from plume.harness.config.preflight import check_train
    from plume.traces.loaders import in_test_split

    folder = tmp_path / "fast60"
    folder.mkdir()
    load_tracebench("majority_fast", "train").subset(list(range(60))).save(folder / "f.npz")
    before = digest(folder)
    splits = []
    for test_sets in (f"[{folder}]", "null"):  # named again, or the default: the same split
        with caplog.at_level("INFO", logger="plume"):
            inputs = check_train(compose_cfg(*TINY, f"env.dataset={folder}",
                                             "env.trace_format=npz",
                                             f"env.test_sets={test_sets}"))
        test = inputs.test_sets["fast60"]
        assert all(in_test_split(i) for i in test.trace_ids) and 0 < len(test) < 60
        assert not set(test.trace_ids) & set(inputs.train_traces.trace_ids)
        assert len(test) + len(inputs.train_traces) == 60
        splits.append(list(test.trace_ids))
    assert splits[0] == splits[1]
    assert {r.getMessage() for r in caplog.records if r.getMessage().startswith("test set")} == {(
        f"test set split of {folder}: sha256(trace id) % 100 < 20 -> test ({len(test)} of 60 "
        "traces): the training dataset's own test split (its other traces train)")}
    assert digest(folder) == before
