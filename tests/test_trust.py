"""Run directories anyone can trust: a checkpoint never runs code, a user's mistake (a bad
trace file, a typo, an env package that does not import, a name that leaves paths.root) is one
line with nothing left on disk, and a sweep reports its refused jobs and goes on."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from plume.harness.apps.train import run_job
from plume.runs import statefile
from plume.runs.store import RunDirectory
from plume.traces.lb import write_lb_csv
from plume.traces.loaders import write_cooked, write_puffer_sample
from plume.traces.tracebench import load_tracebench
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]


class _Payload:
    """What an attacker plants: unpickling it creates the sentinel file."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self):
        return os.system, (f"touch {self.sentinel}",)


def _interrupted_run(compose_cfg, tmp_path):
    """A finished tiny job marked as killed (so a re-run resumes from its checkpoint), and the
    eval.parquet bytes of the uninterrupted run."""
    cfg = compose_cfg(*TINY, "logger=none", "sampler=plume_dynamic")
    run_job(cfg, tmp_path / "run")
    run = RunDirectory(tmp_path / "run")
    expected = (tmp_path / "run" / "eval.parquet").read_bytes()
    run.write_status("failed", error="killed")
    return cfg, run, expected


def _rerun_restarts_from_scratch(cfg, run, expected, caplog, sentinel: Path, reason: str):
    with caplog.at_level("WARNING", logger="plume"):
        run_job(cfg, run.path)
    assert not sentinel.exists(), "the planted payload ran"
    warnings = [r.getMessage() for r in caplog.records if "not resuming" in r.getMessage()]
    assert len(warnings) == 1 and reason in warnings[0] and "\n" not in warnings[0]
    assert warnings[0].endswith("training from the start")
    assert run.status()["state"] == "completed" and run.status()["resumes"] == []
    assert (run.path / "eval.parquet").read_bytes() == expected


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch, on the raw pickle
@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_a_pickle_planted_as_the_checkpoint_runs_nothing(compose_cfg, tmp_path, caplog, how):
    cfg, run, expected = _interrupted_run(compose_cfg, tmp_path)
    sentinel = tmp_path / "pwned"
    path = run.path / "checkpoint.pt"
    if how == "torch.save":
        torch.save({"env_steps": 1024, "agent": _Payload(sentinel)}, path)
    else:
        path.write_bytes(pickle.dumps(_Payload(sentinel)))
    _rerun_restarts_from_scratch(cfg, run, expected, caplog, sentinel,
                                 "unreadable checkpoint: not a data-only state file")


def test_a_pickle_planted_as_the_env_snapshot_runs_nothing(compose_cfg, tmp_path, caplog):
    cfg, run, expected = _interrupted_run(compose_cfg, tmp_path)
    sentinel = tmp_path / "pwned"
    state = run.load_checkpoint()  # the fingerprint matches: only the snapshot is planted
    state["in_flight"] = pickle.dumps(_Payload(sentinel))  # what the old format held
    run.save_checkpoint(state)
    _rerun_restarts_from_scratch(cfg, run, expected, caplog, sentinel,
                                 "expected an encoded state, got bytes")


def test_a_snapshot_naming_a_class_the_job_does_not_build_is_refused(compose_cfg, tmp_path,
                                                                     caplog):
    cfg, run, expected = _interrupted_run(compose_cfg, tmp_path)
    state = run.load_checkpoint()
    structure = json.loads(state["in_flight"].structure)
    env = next(v for k, v in structure["v"] if k == "env")
    env["class"] = "subprocess.Popen"  # a class the attacker would like rebuilt
    state["in_flight"] = statefile.Encoded(json.dumps(structure), state["in_flight"].tensors)
    run.save_checkpoint(state)
    _rerun_restarts_from_scratch(cfg, run, expected, caplog, tmp_path / "none",
                                 "class 'subprocess.Popen' is not one this job builds")


def test_a_checkpoint_is_data_that_torch_loads_with_weights_only(compose_cfg, tmp_path):
    tiny = [o for o in TINY if not o.startswith("algo.n_steps")]
    run_job(compose_cfg(*tiny, "logger=none", "algo=dqn", "algo.learning_starts=256",
                        "sampler=plr"), tmp_path)
    payload = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert sorted(payload) == ["format", "structure", "tensors"]
    assert payload["format"] == statefile.FORMAT and isinstance(payload["structure"], str)
    state = RunDirectory(tmp_path).load_checkpoint()
    assert state["env_steps"] == 2048 and isinstance(state["in_flight"], statefile.Encoded)


@pytest.mark.parametrize("text", ["[1, 2]", '{"state": "running", "pid": "abc"}', "\xff"])
def test_a_damaged_status_is_not_trusted_and_the_job_trains_afresh(compose_cfg, tmp_path,
                                                                     caplog, text):
    cfg, run, expected = _interrupted_run(compose_cfg, tmp_path)
    (run.path / "status.json").write_text(text, errors="surrogateescape")
    with caplog.at_level("WARNING", logger="plume"):
        run_job(cfg, run.path)
    if text.startswith("{"):  # a JSON object: its pid is unknown, the job resumes
        assert run.status()["resumes"][0]["from_env_steps"] == 2048
    else:
        assert "status.json is not a Plume status; the job starts afresh" in caplog.text
        assert run.status()["resumes"] == []
    assert run.status()["state"] == "completed"
    assert (run.path / "eval.parquet").read_bytes() == expected


# --------------------------------------------------------------------------- data first

def _plume_train_here(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """``plume-train args`` in this process: (exit status, stderr)."""
    from hydra.core.global_hydra import GlobalHydra

    from plume.harness.apps import train

    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", ["plume-train", *args])
    try:
        with pytest.raises(SystemExit) as stop:
            train.main()
    finally:
        GlobalHydra.instance().clear()
    return stop.value.code, capsys.readouterr().err


def _cooked_folder(root: Path, bad_text: str | None) -> Path:
    """Ten good cooked traces (two land in the test split) and one bad file, ``bad.txt``."""
    traces = load_tracebench("balanced", "test").subset(range(10))
    folder = root / "cooked"
    for i in range(10):
        n = traces.lengths[i]
        write_cooked(folder / f"trace_{i}.txt", traces.time[i, :n], traces.bandwidth[i, :n],
                     period=float(traces.time[i, n - 1] + 1.0))
    if bad_text is not None:
        (folder / "bad.txt").write_text(bad_text)
    return folder


def _lb_folder(root: Path, bad_text: str) -> Path:
    rng = np.random.default_rng(0)
    folder = root / "lb"
    for i in range(10):
        write_lb_csv(folder / f"jobs_{i}.csv", rng.integers(0, 60, 300).astype(float),
                     rng.integers(1, 50, 300).astype(float))
    (folder / "bad.csv").write_text(bad_text)
    return folder


def _puffer_folder(root: Path) -> Path:
    folder = write_puffer_sample(root / "puffer", n_streams=4, n_chunks=120)
    (sent,) = folder.rglob("video_sent*.csv")
    rows = [line.split(",") for line in sent.read_text().splitlines()]
    keep = [i for i, name in enumerate(rows[0]) if name != "ssim_index"]
    sent.write_text("".join(",".join(r[i] for i in keep) + "\n" for r in rows))
    return folder


COOKED = ["env=abr", "env.variant=pensieve", "algo=a2c_pensieve", "env.trace_format=cooked"]
BAD_DATA = {
    "cooked empty": (COOKED, lambda r: _cooked_folder(r, ""), "bad.txt"),
    "cooked non-numeric": (COOKED, lambda r: _cooked_folder(r, "0 1\n1 x\n"), "bad.txt:2"),
    "cooked decreasing": (COOKED, lambda r: _cooked_folder(r, "0 1\n2 1\n1 1\n"), "bad.txt:3"),
    "cooked negative": (COOKED, lambda r: _cooked_folder(r, "0 1\n1 -1\n"), "bad.txt:2"),
    "cooked NaN": (COOKED, lambda r: _cooked_folder(r, "0 1\n1 nan\n"), "bad.txt:2"),
    "cooked one line": (COOKED, lambda r: _cooked_folder(r, "0 1\n"), "bad.txt:1"),
    "mahimahi empty": (["env=abr", "env.variant=pensieve", "algo=a2c_pensieve",
                        "env.trace_format=mahimahi"], None, "bad.log"),
    "mahimahi non-integer": (["env=abr", "env.variant=pensieve", "algo=a2c_pensieve",
                              "env.trace_format=mahimahi"], None, "bad.log:2"),
    "lb header only": (["env=lb", "env.trace_format=csv"],
                       lambda r: _lb_folder(r, "arrival_time,size\n"), "bad.csv"),
    "lb negative size": (["env=lb", "env.trace_format=csv"],
                         lambda r: _lb_folder(r, "arrival_time,size\n0,5\n1,-3\n"), "bad.csv:3"),
    "lb unsorted": (["env=lb", "env.trace_format=csv"],
                    lambda r: _lb_folder(r, "arrival_time,size\n0,5\n9,3\n4,3\n"), "bad.csv:4"),
    "puffer missing column": (["env=abr", "env.trace_format=puffer"], _puffer_folder,
                              "ssim_index"),
    "npz corrupt": (["env.trace_format=npz"], None, "bad.npz"),
    "npz keyless": (["env.trace_format=npz"], None, "bad.npz"),
}


def _mahimahi_folder(root: Path, bad_text: str) -> Path:
    folder = root / "mahimahi"
    for i in range(10):
        stamps = np.cumsum(np.random.default_rng(i).integers(0, 3, 4000))
        (folder / f"link_{i}.log").parent.mkdir(parents=True, exist_ok=True)
        (folder / f"link_{i}.log").write_text("".join(f"{s + 1}\n" for s in stamps))
    (folder / "bad.log").write_text(bad_text)
    return folder


def _npz(root: Path, case: str) -> Path:
    path = root / "bad.npz"
    root.mkdir(parents=True)
    if case == "npz corrupt":
        path.write_bytes(np.random.default_rng(0).bytes(4000))
    else:
        np.savez(path, something=np.arange(3))
    return path


def _bad_dataset(case: str, root: Path) -> Path:
    if case.startswith("mahimahi"):
        return _mahimahi_folder(root, "" if case.endswith("empty") else "5\n6.5\n")
    if case.startswith("npz"):
        return _npz(root, case)
    return BAD_DATA[case][1](root)


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_data_is_refused_in_one_line_before_anything_exists(case, tmp_path, monkeypatch,
                                                                capsys):
    overrides, _, named = BAD_DATA[case]
    dataset = _bad_dataset(case, tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    code, err = _plume_train_here(
        monkeypatch, capsys, *overrides, f"env.dataset={dataset}", "logger=wandb",
        f"paths.root={tmp_path / 'runs'}", f"paths.cache={tmp_path / 'cache'}")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("plume-train: error: "), err
    assert named in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # no runs/, cache/, wandb/


def test_a_sidecar_file_in_a_trace_folder_is_skipped_and_listed(compose_cfg, tmp_path, caplog):
    from plume.harness.config.preflight import check_train

    folder = _cooked_folder(tmp_path, None)
    (folder / "meta.json").write_text('{"source": "somewhere"}')
    with caplog.at_level("INFO", logger="plume"):
        inputs = check_train(compose_cfg(*COOKED, f"env.dataset={folder}",
                                         f"paths.cache={tmp_path / 'cache'}"))
    ids = [*inputs.train_traces.trace_ids, *next(iter(inputs.test_sets.values())).trace_ids]
    assert sorted(ids) == sorted(f"trace_{i}" for i in range(10))
    listed = [r.getMessage() for r in caplog.records if "meta.json" in r.getMessage()]
    assert len(listed) >= 1 and "skipped 1 non-trace file" in listed[0]


# --------------------------------------------------------------------------- user mistakes

MISTAKES = {
    "typo added with +": (["+trian.total_steps=5"], "unknown top-level key(s) trian"),
    "exp_name leaves the root": (["exp_name=../../x"], ("exp_name='../../x' would put run "
                                                        "folders outside paths.root")),
    "absolute exp_name": (["exp_name=/tmp/elsewhere"], "would put run folders outside"),
    "package without SPEC": (["+env.package={pk}/nospec.py"], "defines no SPEC"),
    "package with a syntax error": (["+env.package={pk}/broken.py"],
                                    "SyntaxError: invalid syntax ({pk}/broken.py:2)"),
    "package that raises": (["+env.package={pk}/raises.py"],
                            "RuntimeError: no GPU here ({pk}/raises.py:3)"),
    "package not found": (["+env.package=no_such_module_xyz"],
                          "No module named 'no_such_module_xyz'"),
    "package SPEC of another name": (["+env.package={pk}/other.py"],
                                     "its SPEC is named 'abr', but env.name is 'tracebench'"),
}


def _packages(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "nospec.py").write_text("VALUE = 1\n")
    (folder / "broken.py").write_text("VALUE = 1\ndef spec(:\n")
    (folder / "raises.py").write_text("import os\n\nraise RuntimeError('no GPU here')\n")
    (folder / "other.py").write_text("from plume.envs.abr import SPEC\n")
    return folder


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_a_mistake_is_one_line_and_leaves_nothing(case, tmp_path, monkeypatch, capsys):
    pk = _packages(tmp_path / "pk")
    overrides, expected = MISTAKES[case]
    monkeypatch.chdir(tmp_path)
    code, err = _plume_train_here(monkeypatch, capsys, *TINY, "logger=wandb",
                                  *[o.format(pk=pk) for o in overrides],
                                  f"paths.root={tmp_path / 'runs' / 'root'}")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert expected.format(pk=pk) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pk"]
    assert not Path("/tmp/elsewhere").exists()


def test_plume_analyze_refuses_a_split_that_leaves_the_root_before_making_folders(
        tmp_path, monkeypatch, capsys):
    from hydra.core.global_hydra import GlobalHydra

    from plume.harness.apps import analyze

    monkeypatch.chdir(tmp_path)
    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", ["plume-analyze", "split=x/../..",
                                      f"paths.root={tmp_path / 'runs'}"])
    with pytest.raises(SystemExit) as stop:
        analyze.main()
    GlobalHydra.instance().clear()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err == ("plume-analyze: error: split must be 'train' or "
                                            "'test', got 'x/../..'\n")
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_refuses_jobs_in_one_line_each_finishes_the_others_and_exits_2(
        tmp_path, monkeypatch, capsys):
    """Refused before launch (a bad value: no folder), refused while running (a diverged
    learner, a job in use): one line each, a summary, status 2, no traceback."""
    root = tmp_path / "runs"
    args = [*[o for o in TINY if not o.startswith(("algo.", "train.total_steps"))], "algo=a2c",
            "algo.n_steps=16", "logger=none", f"paths.root={root}", "train.total_steps=512"]
    code, err = _plume_train_here(monkeypatch, capsys, "-m", *args, "seed=0,1",
                                  "algo.learning_rate=7e-4,-1,1e30", "algo.max_grad_norm=1e30")
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err
    diverged = ("update 1: the network's outputs are no longer finite (acting failed: "
                "probability tensor contains either `inf`, `nan` or element < 0); a smaller "
                "algo.learning_rate usually helps")
    bad_value = "algo: A2CConfig.learning_rate must be > 0, got -1.0"
    assert lines == [
        f"plume-train: refused [seed=0 algo.learning_rate=-1]: {bad_value}",
        f"plume-train: refused [seed=1 algo.learning_rate=-1]: {bad_value}",
        f"plume-train: refused [seed=0 algo.learning_rate=1e+30]: {diverged}",
        f"plume-train: refused [seed=1 algo.learning_rate=1e+30]: {diverged}",
        "plume-train: sweep of 6 job(s): 2 completed, 4 refused, 0 failed"]
    folders = sorted(p.parent.parent.name.split("algo.learning_rate=")[1].split(",")[0]
                     for p in root.rglob("status.json"))
    assert folders == ["0.0007", "0.0007", "1e+30", "1e+30"]  # none for the bad value


def test_a_job_in_use_is_refused_in_a_sweep(compose_cfg, tmp_path, monkeypatch, capsys):
    root = tmp_path / "runs"
    args = [*TINY, "logger=none", f"paths.root={root}"]
    code, _ = _plume_train_here(monkeypatch, capsys, *args)
    assert code == 0
    (run_dir,) = (p.parent for p in root.rglob("status.json"))
    with RunDirectory(run_dir).lock():
        code, err = _plume_train_here(monkeypatch, capsys, "-m", *args, "overwrite=true")
    assert code == 2 and "Traceback" not in err
    in_use = (f"plume-train: refused: {run_dir} is in use by another process (pid "
              f"{os.getpid()} on {os.uname().nodename}): the same job is already running")
    assert err.strip().splitlines() == [
        in_use, "plume-train: sweep of 1 job(s): 0 completed, 1 refused, 0 failed"]


# --------------------------------------------------------------------------- portability

REPRODUCTION = [
    "tests/test_algorithms.py::test_ppo_on_the_contract_reproduces_the_recorded_runs",
    ("tests/test_env_contract.py::test_the_ported_harness_reproduces_the_recorded_tracebench"
     "_run_exactly"),
    "tests/test_trust.py::test_the_floating_point_path_is_the_pinned_one",
]


def test_the_floating_point_path_is_the_pinned_one():
    expected = {"avx2": "AVX2", "baseline": "DEFAULT"}[os.environ.get("PLUME_TEST_FP", "avx2")]
    assert torch.backends.cpu.get_cpu_capability() == expected
    assert os.environ["MKL_CBWR"] == "COMPATIBLE" and torch.get_num_threads() >= 1


# ~27 s: the default suite runs the reproduction tests on the AVX2 path every time; this
# second pass on SSE-level kernels is for a new machine or toolchain (-m slow).
@pytest.mark.slow
def test_the_reproduction_tests_pass_on_baseline_kernels_too():
    """This session runs them on AVX2 kernels (tests/conftest.py); a second process runs them
    on SSE-level kernels of numpy, torch and oneDNN: both match the one recorded reference."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *REPRODUCTION], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PLUME_TEST_FP": "baseline"}, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "4 passed" in done.stdout
