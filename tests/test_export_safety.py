"""An export never deletes what it did not write and never decides from a damaged file.

plume-export: a non-empty ``--out`` that is not an earlier export of the same run, the run
itself and any folder above it are refused in one line with every file byte-identical; a
re-export replaces only the export's files; a checkpoint of another configuration (another
seed, another env) is refused; a failure after staging leaves nothing. Loading: the contract's
seal (SHA-256 of the model files and of the contract) and its agreement with the environment's
own definition are checked before the first decision, by ``load_controller``, ``plume-serve``
and ``plume-emulate`` alike, each refusal one line and before any socket or run directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from plume.deploy import load_controller
from plume.deploy.contract import ContractError
from plume.deploy.export import ParityError, contract_for, export_controller, export_policy
from plume.harness.apps.export import main as export_main
from plume.harness.apps.train import run_job
from tests.conftest import ONE_THREAD, TINY, compose_train

BASE = [o for o in TINY if not o.startswith(("env.test_sets", "algo.", "train.total_steps",
                                             "env.n_envs"))]
BASE += ["logger=none", "train.eval_points=1", "env.n_envs=4", "train.total_steps=64",
         "analysis.k_range=[2,3]", "analysis.selection.k_end=3"]
RUNS = {  # name: (folder under the sweep root, overrides)
    "cc0": ("exp/algo=a2c_aurora/seed=0", ["env=cc", "algo=a2c_aurora", "seed=0"]),
    "cc1": ("exp/algo=a2c_aurora/seed=1", ["env=cc", "algo=a2c_aurora", "seed=1"]),
    "lb0": ("lb/algo=a2c/seed=0", ["env=lb", "algo=a2c", "seed=0"]),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The three tiny runs of RUNS, trained once for the module (tests work on copies); the
    LB run exported into its default folder."""
    from plume.harness.apps.export import export_run

    root = tmp_path_factory.mktemp("sweep")
    for folder, overrides in RUNS.values():
        run_job(compose_train(*BASE, *overrides, f"paths.root={root}"), root / folder)
    export_run(root / RUNS["lb0"][0])
    return {name: root / folder for name, (folder, _) in RUNS.items()}


@pytest.fixture
def sweep(trained, tmp_path):
    """A private copy of the sweep: {name: run dir} under tmp_path/sweep."""
    source_root = trained["cc0"].parents[2]
    shutil.copytree(source_root, tmp_path / "sweep")
    return {name: tmp_path / "sweep" / path.relative_to(source_root)
            for name, path in trained.items()}


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (None) under ``folder``, by relative path."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def export(capsys, *args) -> tuple[int, list[str]]:
    """``plume-export ARGS`` in this process, with logging as a fresh process has it (an
    earlier test's handlers, some bound to capture streams since closed, are set aside for
    the call): (exit code, the command's own error lines); no line may be a traceback's."""
    import logging

    loggers = [logging.getLogger(), logging.getLogger("plume")]
    kept = [list(logger.handlers) for logger in loggers]
    for logger in loggers:
        logger.handlers.clear()
    try:
        export_main([str(a) for a in args])
        code = 0
    except SystemExit as stop:
        code = int(stop.code)
    finally:
        for logger, handlers in zip(loggers, kept):
            logger.handlers[:] = handlers
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.startswith("plume-export:")]


# --- plume-export never deletes what it did not write -------------------------------------

def test_a_folder_of_other_files_is_refused_and_left_byte_identical(sweep, capsys, tmp_path):
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "todo.txt").write_text("my notes\n")
    (notes / "sub" / "data.csv").write_text("a,b\n1,2\n")
    before, run_before = snapshot(notes), snapshot(sweep["cc0"])
    code, lines = export(capsys, sweep["cc0"], "--out", notes)
    assert code == 2
    assert lines == [f"plume-export: --out {notes.resolve()} is not empty and holds no earlier "
                     "export of this run; nothing was written (choose a new or empty folder)"]
    assert snapshot(notes) == before and snapshot(sweep["cc0"]) == run_before


def test_the_run_itself_and_the_folders_above_it_are_refused(sweep, capsys):
    run = sweep["cc0"].resolve()
    everything = snapshot(run.parents[2])
    code, lines = export(capsys, run, "--out", run)
    assert code == 2 and lines == [
        f"plume-export: --out {run} is the run directory itself; an export goes into a "
        f"folder of its own (default {run / 'export'})"]
    for above in (run.parent, run.parents[1], run.parents[2]):  # overrides, experiment, root
        code, lines = export(capsys, run, "--out", above)
        assert code == 2 and lines == [
            f"plume-export: --out {above} contains the run {run} (a sweep root or a parent "
            "folder); choose a new or empty folder"]
    assert snapshot(run.parents[2]) == everything


def test_a_re_export_replaces_only_the_files_an_export_writes(sweep, capsys):
    run = sweep["cc0"]
    assert export(capsys, run) == (0, [])
    folder = run / "export"
    assert sorted(p.name for p in folder.iterdir()) == ["contract.json", "policy.onnx",
                                                        "policy.pt"]
    (folder / "README.txt").write_text("deployed on host A\n")
    (folder / "logs").mkdir()
    (folder / "logs" / "a.log").write_bytes(b"\x00\x01")
    assert export(capsys, run) == (0, [])
    assert (folder / "README.txt").read_text() == "deployed on host A\n"
    assert (folder / "logs" / "a.log").read_bytes() == b"\x00\x01"
    entries = json.loads((run / "exports.json").read_text())["exports"]
    assert [e["path"] for e in entries] == [str(folder.resolve())]
    load_controller(folder)
    # A run moved elsewhere (same config.yaml) re-exports into its own export folder.
    moved = run.parents[3] / "moved"
    shutil.move(run, moved)
    assert export(capsys, moved) == (0, [])
    assert (moved / "export" / "README.txt").is_file()
    assert not [p for p in moved.parent.iterdir() if p.name.startswith(".export-")]


def test_an_export_of_another_run_is_not_replaced(sweep, capsys, tmp_path):
    out = tmp_path / "deployed"
    assert export(capsys, sweep["cc1"], "--out", out) == (0, [])
    before = snapshot(out)
    code, lines = export(capsys, sweep["cc0"], "--out", out)
    assert code == 2 and "holds no earlier export of this run" in lines[0] and len(lines) == 1
    assert snapshot(out) == before


@pytest.mark.parametrize("donor", ["cc1", "lb0"])
def test_a_checkpoint_of_another_configuration_is_refused(sweep, capsys, donor):
    """Seed 1's checkpoint copied into seed 0's folder, or an LB learner's into a CC run:
    the fingerprint differs from the run's config; nothing is exported."""
    run = sweep["cc0"]
    shutil.copyfile(sweep[donor] / "checkpoint.pt", run / "checkpoint.pt")
    before = snapshot(run)
    code, lines = export(capsys, run)
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"plume-export: {run / 'checkpoint.pt'}: trained by another "
                               "configuration (fingerprint ")
    assert lines[0].endswith("); export the run directory that made it")
    assert snapshot(run) == before  # no export folder, no exports.json


def test_a_wandb_failure_after_staging_leaves_the_run_as_it_was(sweep, capsys, monkeypatch,
                                                                 tmp_path):
    """The export is staged (learner loaded, parity checked) before W&B is asked; W&B online
    without credentials refuses, and nothing is installed or recorded."""
    import yaml

    run = sweep["cc0"]
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["logger"] = {"name": "wandb", "mode": "online", "project": "plume", "entity": None,
                        "tags": []}
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    before = snapshot(run)
    code, lines = export(capsys, run)
    assert code == 2 and lines == [
        "plume-export: W&B could not log the export as an artifact (logger.mode=online needs "
        "W&B credentials (`wandb login` or WANDB_API_KEY); use logger.mode=offline and `wandb "
        "sync` later); nothing was exported"]
    assert snapshot(run) == before


def _unshare_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


def test_a_read_only_destination_is_refused_in_one_line(sweep, tmp_path):
    """Root ignores permission bits, so as root the folder is made read-only by a bind mount
    in a private mount namespace of the command's own (gone when it exits)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    command = [sys.executable, "-m", "plume.harness.apps.export", str(sweep["cc0"]), "--out",
               str(locked / "export")]
    if os.geteuid() != 0:
        locked.chmod(0o555)
    elif _unshare_works():
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   f"mount --bind {locked} {locked} && mount -o remount,bind,ro {locked} "
                   '&& exec "$@"', "sh", *command]
    else:
        pytest.skip("as root, a read-only folder needs a private mount namespace (unshare)")
    out = subprocess.run(command, capture_output=True, text=True, timeout=120,
                         env={**os.environ, **ONE_THREAD})
    locked.chmod(0o755)
    assert out.returncode == 2, out.stderr
    reason = "Read-only file system" if os.geteuid() == 0 else "Permission denied"
    assert out.stderr.splitlines() == [
        f"plume-export: --out {locked / 'export'}: cannot write there ({reason})"]
    assert list(locked.iterdir()) == [] and not (sweep["cc0"] / "exports.json").exists()


def test_a_full_disk_is_one_line_and_leaves_nothing(sweep, tmp_path):
    """A real ENOSPC: the destination is a 16 kB tmpfs in a private mount namespace (the
    model files do not fit); the staged files are removed and the run is untouched."""
    from tests.test_one_line_errors import on_small_disk

    run = sweep["cc0"]
    before = snapshot(run)
    done, after = on_small_disk(tmp_path, "16k", [
        sys.executable, "-m", "plume.harness.apps.export", str(run), "--out",
        str(tmp_path / "disk" / "export")])
    assert done.returncode == 2, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if not x.startswith("[plume-export]")]
    assert line.startswith(f"plume-export: no space left on device writing {tmp_path / 'disk'}")
    assert list(after.iterdir()) == [] and snapshot(run) == before


def test_a_failure_after_staging_leaves_nothing(tmp_path):
    """A real export whose ONNX and TorchScript files are written and then fail the parity
    check (a network with NaN weights computes NaN, which equals nothing): no folder made for
    the destination remains, and no staging folder."""
    import torch

    from plume.agents.base import GreedyPolicy
    from plume.envs.registry import get_env

    spec = get_env("lb")
    params = spec.params()
    module = torch.nn.Linear(11, 10)
    with torch.no_grad():
        module.weight.fill_(float("nan"))
    greedy = GreedyPolicy(module.eval(), "logits", {"kind": "argmax", "start": 0})
    contract = contract_for(spec, params, {"algorithm": "a2c"}, {"config_sha256": "0" * 64})
    out = tmp_path / "new" / "deeper" / "export"
    with pytest.raises(ParityError, match="differs from PyTorch at recorded step 0"):
        export_policy(greedy, np.zeros((8, 11), np.float32), contract, out)
    assert list(tmp_path.iterdir()) == []


# --- a damaged or edited export is refused before its first decision ------------------------

def reseal(folder: Path) -> None:
    """Recompute the seal as contract.json's documentation describes it: SHA-256 of each model
    file, then of the canonical JSON (sorted keys, no spaces) of the contract without
    ``integrity.contract_sha256``. (What a careless tool, or someone covering an edit, does.)"""
    contract = json.loads((folder / "contract.json").read_text())
    integrity = contract["integrity"]
    for name in integrity["files"]:
        integrity["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    integrity.pop("contract_sha256")
    text = json.dumps(contract, sort_keys=True, separators=(",", ":"))
    integrity["contract_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    (folder / "contract.json").write_text(json.dumps(contract, indent=2))


def edit(folder: Path, path: str, value, sealed: bool) -> None:
    """Set the dotted ``path`` of contract.json to ``value`` (resealed when ``sealed``)."""
    contract = json.loads((folder / "contract.json").read_text())
    *parents, last = path.split(".")
    node = contract
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    (folder / "contract.json").write_text(json.dumps(contract, indent=2))
    if sealed:
        reseal(folder)


@pytest.fixture
def lb_export(sweep):
    return sweep["lb0"] / "export"


def test_an_edited_contract_fails_its_seal(lb_export):
    where = lb_export / "contract.json"
    original = where.read_text()
    edit(lb_export, "policy.greedy.start", 1, sealed=False)
    with pytest.raises(ContractError) as err:
        load_controller(lb_export)
    assert str(err.value) == (f"{where}: content does not match its SHA-256 (the contract "
                              "was edited or damaged); export the run again")
    where.write_text(original.replace('"obs_high": ', '"obs_high": NaN, "was": ', 1))
    with pytest.raises(ContractError) as err:
        load_controller(lb_export)
    assert str(err.value) == f"{where}: non-finite number NaN (JSON has none; the file was edited)"
    where.write_text(original[: len(original) // 2])  # a torn copy
    with pytest.raises(ContractError, match="unreadable contract"):
        load_controller(lb_export)


def test_resealed_edits_meet_the_environments_own_definition(lb_export):
    contract = json.loads((lb_export / "contract.json").read_text())
    servers = contract["constants"]["n_servers"]
    cases = [
        ("policy.greedy.start", 1, "policy.greedy.start is 1, the action's first choice is 0"),
        ("constants.n_servers", 5, f"constants.n_servers is 5, the environment defines "
                                   f"{servers} for these env.params"),
        ("constants.obs_scale", -1.0, "constants.obs_scale is -1.0, the environment defines"),
        ("policy.input.shape", [None, 7], f"policy.input.shape[1] is 7, the observation "
                                          f"layout [{servers + 1}] has {servers + 1} values"),
        ("action.n", 3, "action.n is 3, the environment defines"),
    ]
    original = (lb_export / "contract.json").read_text()
    for path, value, message in cases:
        edit(lb_export, path, value, sealed=True)
        with pytest.raises(ContractError, match=message.replace("[", r"\[")):
            load_controller(lb_export)
        (lb_export / "contract.json").write_text(original)
    load_controller(lb_export)  # the original still loads


def test_a_replaced_model_file_is_refused(lb_export, sweep, capsys):
    model = lb_export / "policy.onnx"
    model.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ContractError, match="policy.onnx: SHA-256 differs from the contract's"):
        load_controller(lb_export)
    reseal(lb_export)  # random bytes with a matching hash: onnxruntime cannot run them
    with pytest.raises(ContractError, match=r"policy.onnx: not a model onnxruntime can run \("):
        load_controller(lb_export)
    # A real model of another run (CC's: 30 inputs), resealed: its signature gives it away.
    assert export(capsys, sweep["cc0"]) == (0, [])
    shutil.copyfile(sweep["cc0"] / "export" / "policy.onnx", model)
    reseal(lb_export)
    servers = json.loads((lb_export / "contract.json").read_text())["constants"]["n_servers"]
    with pytest.raises(ContractError, match=f"the model takes 'obs' of width 30, the contract "
                                            f"says 'obs' of {servers + 1}"):
        load_controller(lb_export)


def test_an_unsealed_export_of_an_older_plume_is_refused_with_the_fix(tmp_path):
    folder = export_controller("lb", {}, "least_work_left", tmp_path / "rule")
    edit(folder, "format", "plume-controller/1", sealed=False)
    with pytest.raises(ContractError, match=r"format 'plume-controller/1'; this Plume reads "
                                            r"'plume-controller/2' \(made by an older Plume"):
        load_controller(folder)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_plume_serve_refuses_a_damaged_export_before_it_listens(tmp_path):
    folder = export_controller("abr", {"variant": "pensieve"}, "bba", tmp_path / "bba")
    edit(folder, "constants.n_chunks", -5, sealed=True)
    port = _free_port()
    out = subprocess.run([sys.executable, "-m", "plume.deploy.serve", "pensieve", str(folder),
                          "--port", str(port)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **ONE_THREAD})
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"plume-serve pensieve: error: {folder / 'contract.json'}: constants.n_chunks is -5, "
        "the environment defines 48 for these env.params (the export was edited or made by "
        "another Plume version); export the run again"]
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass


def test_plume_emulate_refuses_a_damaged_export_before_its_run_directory(tmp_path):
    folder = export_controller("abr", {"variant": "pensieve"}, "bba", tmp_path / "bba")
    edit(folder, "action.levels_kbps.0", 0, sealed=True)
    root = tmp_path / "runs"
    out = subprocess.run([sys.executable, "-m", "plume.harness.apps.emulate", "env=abr",
                          "env.variant=pensieve", f"export={folder}", f"paths.root={root}",
                          "exp_name=e", "emulation.traces=1"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, **ONE_THREAD})
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        f"plume-emulate: error: export={folder}: {folder / 'contract.json'}: "
        "action.levels_kbps[0] is 0, the environment defines 300 for these env.params (the "
        "export was edited or made by another Plume version); export the run again"]
    assert not list(root.rglob("status.json"))


def _corrupt_model(folder: Path) -> None:
    """Random bytes for policy.onnx, resealed: only onnxruntime can tell."""
    (folder / "policy.onnx").write_bytes(np.random.default_rng(1).bytes(2048))
    reseal(folder)


def test_a_corrupt_model_is_one_line_from_serve_and_emulate(sweep, capsys, tmp_path):
    assert export(capsys, sweep["cc0"]) == (0, [])
    folder = sweep["cc0"] / "export"
    _corrupt_model(folder)
    root = tmp_path / "runs"
    commands = {
        "plume-serve pcc": [sys.executable, "-m", "plume.deploy.serve", "pcc", str(folder),
                            "--write-module", str(tmp_path / "module")],
        "plume-emulate": [sys.executable, "-m", "plume.harness.apps.emulate", "env=cc",
                          f"export='{folder}'", f"paths.root={root}", "exp_name=e"],
    }
    for name, command in commands.items():
        out = subprocess.run(command, capture_output=True, text=True, timeout=120,
                             env={**os.environ, **ONE_THREAD})
        assert out.returncode == 2, out.stderr
        (line,) = out.stderr.splitlines()
        assert line.startswith(f"{name}: error: ") and line.endswith(")")
        assert f"{folder / 'policy.onnx'}: not a model onnxruntime can run (" in line
    assert not (tmp_path / "module").exists() and not list(root.rglob("status.json"))
