"""Export and deployment: plume-export writes TorchScript, ONNX and contract.json that agree
with the trained policy on its own test observations; the torch-free runtime, fed only the raw
measurements a real client has, decides as the policy did in the simulator (every step of every
replayed episode); the contract survives a fresh process where torch cannot be imported."""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hydra import compose
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from plume.deploy import load_controller
from plume.deploy.contract import ContractError, read_contract
from plume.deploy.export import ParityError, check_parity, export_controller
from plume.deploy.replay import simulated_sessions
from plume.deploy.sessions import MeasurementError
from plume.harness.apps.export import export_run
from plume.harness.apps.train import run_job
from plume.harness.config.configdir import plume_hydra
from plume.runs.store import RunDirectory
from tests.conftest import ONE_THREAD, TINY, compose_train

# One update of each learner: the weights only need to be a network's, not a good one's.
BASE = [o for o in TINY if not o.startswith(("env.test_sets", "algo.", "train.total_steps",
                                             "env.n_envs"))]
BASE += ["logger=none", "train.eval_points=1", "env.n_envs=4", "analysis.k_range=[2,3]",
         "analysis.selection.k_end=3"]
DQN = ["algo.buffer_size=512", "algo.learning_starts=64", "algo.batch_size=32"]
CASES = {
    # name: (overrides, slow). The default suite covers each head and network once: categorical
    # (Pensieve's network), Gaussian (MLP) and DQN (Gelato's network); -m slow runs them all.
    "a2c-gelato": (["env=abr", "algo=a2c_gelato", "train.total_steps=64"], True),
    "a2c-pensieve": (["env=abr", "env.variant=pensieve", "algo=a2c_pensieve",
                      "train.total_steps=64"], False),
    "a2c-mlp-gaussian": (["env=cc", "algo=a2c_aurora", "train.total_steps=64"], False),
    "ppo-mlp-categorical": (["env=lb", "algo=ppo_lb", "algo.n_steps=16", "algo.n_minibatches=2",
                             "algo.n_epochs=1", "train.total_steps=64"], True),
    "dqn-gelato": (["env=abr", "algo=dqn_gelato", *DQN, "train.total_steps=128"], False),
    "ppo-gelato": (["env=abr", "algo=ppo_abr", "algo.n_steps=16", "algo.n_minibatches=2",
                    "train.total_steps=64"], True),
    "ppo-pensieve": (["env=abr", "env.variant=pensieve", "algo=ppo_abr", "algo.network=pensieve",
                      "algo.hidden_sizes=[128]", "algo.n_steps=16", "algo.n_minibatches=2",
                      "train.total_steps=64"], True),
    "ppo-mlp-gaussian": (["env=cc", "algo=ppo", "algo.n_steps=16", "algo.n_minibatches=2",
                          "train.total_steps=64"], True),
    "a2c-mlp-categorical": (["env=lb", "algo=a2c", "train.total_steps=64"], True),
    "dqn-mlp": (["env=lb", "algo=dqn", *DQN, "train.total_steps=128"], True),
    "dqn-pensieve": (["env=abr", "env.variant=pensieve", "algo=dqn", "algo.network=pensieve",
                      "algo.hidden_sizes=[]", *DQN, "train.total_steps=128"], True),
    "dqn_per-mlp": (["env=lb", "algo=dqn_per", *DQN, "train.total_steps=128"], True),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """trained(case) -> (run dir, export dir): one tiny run per case, exported once."""
    root = tmp_path_factory.mktemp("deploy")
    made: dict[str, tuple[Path, Path]] = {}

    def get(case: str) -> tuple[Path, Path]:
        if case not in made:
            run_dir = root / case
            run_job(compose_train(*BASE, *CASES[case][0], f"paths.root={root}"), run_dir)
            made[case] = (run_dir, export_run(run_dir))
        return made[case]

    return get


def _cases():
    return [pytest.param(name, marks=[pytest.mark.slow] if slow else [])
            for name, (_, slow) in CASES.items()]


def _replay(export: Path, sessions) -> tuple[int, int]:
    """(steps, decisions that differ) of ``sessions`` replayed through the runtime; CC rates
    compare within 1e-6 relative (onnxruntime rounds a batch and a single row differently)."""
    controller = load_controller(export)
    steps = differ = 0
    for session in sessions:
        controller.reset(**session.reset_kwargs)
        for step in session.steps:
            decision = controller.decide(step.measurement)
            steps += 1
            differ += not math.isclose(decision, step.action, rel_tol=1e-6, abs_tol=0.0)
    return steps, differ


@pytest.mark.parametrize("case", _cases())
def test_export_agrees_with_the_policy_and_the_runtime_replays_its_decisions(trained, case):
    run_dir, export = trained(case)
    contract = read_contract(export)
    files = contract["policy"]["files"]
    assert (export / files["onnx"]).stat().st_size > 0
    assert (export / files["torchscript"]).stat().st_size > 0
    parity = contract["parity"]
    assert parity["steps"] > 50
    # Within 1e-5 of the step's largest output (check_parity's own tests pin the rule).
    assert parity["tolerance"] == "1e-05 x max(1, largest |output| of the step)"
    assert set(parity["formats"]) == {"torchscript", "onnx"}
    # The run directory lists the export with its parity result.
    (entry,) = RunDirectory(run_dir).exports()
    assert entry["path"] == str(export.resolve()) and entry["parity"] == parity
    # The contract names where it came from: the config's hash and every data set's hash.
    source = contract["source"]
    assert source["config_sha256"] == hashlib.sha256(
        (run_dir / "config.yaml").read_bytes()).hexdigest()
    assert set(source["trace_data"]) >= {"train"} and source["env_steps"] > 0
    steps, differ = _replay(export, simulated_sessions(export, n=3))
    assert steps > 0 and differ == 0


def test_the_report_lists_exports_with_their_parity(trained, tmp_path):
    from plume.report import build_report

    run_dir, export = trained("a2c-pensieve")
    result = build_report([run_dir], tmp_path / "report", figures=False, reps=100,
                          baseline=None)
    text = result.report.read_text()
    assert "## Exported controllers (plume-export)" in text
    assert str(export.resolve()) in text
    table = (tmp_path / "report" / "tables" / "exports.csv").read_text()
    assert "a2c" in table and "model" in table
    # A damaged record is listed as such; the run itself still reports.
    record = (run_dir / "exports.json").read_text()
    (run_dir / "exports.json").write_text("{not json")
    try:
        text = build_report([run_dir], tmp_path / "again", figures=False, reps=100,
                            baseline=None).report.read_text()
    finally:
        (run_dir / "exports.json").write_text(record)
    assert "exports.json: not valid JSON" in text
    assert "Pooled **1 completed runs**" in text


def test_a_run_that_logs_to_wandb_gets_the_export_as_an_artifact(trained, tmp_path):
    """Offline (nothing leaves the machine): the artifact is in the offline run's records,
    for ``wandb sync`` to upload with it. The run sits in a real sweep folder ``seed=0``,
    whose ``=`` W&B refuses in artifact names (wandb 0.31: ValueError)."""
    import shutil

    import yaml

    from plume.harness.apps.export import artifact_name

    run_dir, _ = trained("a2c-mlp-gaussian")
    copy = tmp_path / "exp" / "sampler=uniform" / "seed=0"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("export", "exports.json"))
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["logger"] = {"name": "wandb", "mode": "offline", "project": "plume", "entity": None,
                        "tags": []}
    (copy / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    export_run(copy)
    name = artifact_name(OmegaConf.load(copy / "config.yaml"), copy)
    assert re.fullmatch(r"controller-[A-Za-z0-9_.-]+-[0-9a-f]{8}", name) and len(name) <= 128
    assert "seed_0" in name and "sampler_uniform" in name
    (records,) = copy.glob("wandb/offline-run-*/run-*.wandb")
    # W&B's writer process may still be flushing the record file when finish() returns
    # (seen once under a loaded machine): wait for it, bounded.
    deadline = time.monotonic() + 30
    while name.encode() not in records.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert name.encode() in records.read_bytes()
    assert (copy / "export" / "contract.json").is_file()


def test_contract_documents_the_gelato_observation(trained):
    _, export = trained("dqn-gelato")
    contract = read_contract(export)
    assert contract["env"] == {**contract["env"], "name": "abr", "variant": "gelato"}
    obs = contract["observation"]
    assert obs["layout"] == [10, 26] and obs["dtype"] == "float32"
    names = [f["name"] for f in obs["fields"]]
    assert names == ["ssim_db", "size", "delay", "buffer", "reward", "stall_groups",
                     "next_sizes", "next_ssim_db"]
    sizes = obs["fields"][names.index("next_sizes")]
    assert (sizes["rows"], sizes["cols"], sizes["unit"]) == ([0, 5], [6, 16], "MB")
    assert contract["action"]["n"] == 10 and contract["action"]["chunk_seconds"] == 2.002
    assert contract["policy"]["input"] == {**contract["policy"]["input"], "shape": [None, 260]}
    assert contract["policy"]["greedy"] == {"kind": "argmax", "start": 0}


def test_the_gaussian_head_exports_its_mean_and_the_clip(trained):
    _, export = trained("a2c-mlp-gaussian")
    policy = read_contract(export)["policy"]
    assert policy["output"]["meaning"] == "mean"
    assert policy["greedy"]["kind"] == "clip"
    assert policy["greedy"]["high"] == [pytest.approx(1e12)]  # the float32 bound


def test_a_fresh_process_without_torch_decides_identically(trained, tmp_path):
    """The contract round trip: sessions recorded here, replayed in a new interpreter in
    which importing torch (or anything of training and reporting) raises: the README's
    torch-free install (numpy, pandas, pyarrow, scipy, gymnasium, onnxruntime) suffices."""
    _, export = trained("a2c-pensieve")
    sessions = simulated_sessions(export, n=2)
    expected = [[s.reset_kwargs, [(st.measurement, st.action) for st in s.steps]]
                for s in sessions]
    data = tmp_path / "sessions.json"
    data.write_text(json.dumps(expected))
    script = textwrap.dedent(f"""
        import importlib.abc, json, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "hydra", "omegaconf", "wandb", "sklearn",
                                          "matplotlib", "tqdm", "rliable", "arch", "yaml"):
                    raise ImportError(f"{{name}} is blocked in this test")
        sys.meta_path.insert(0, Block())
        from plume.deploy import load_controller
        controller = load_controller({str(export)!r})
        decided = []
        for reset, steps in json.load(open({str(data)!r})):
            controller.reset(**reset)
            decided.append([controller.decide(m) for m, _ in steps])
        assert "torch" not in sys.modules
        print(json.dumps(decided))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env={**ONE_THREAD, "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    decided = json.loads(out.stdout)
    assert decided == [[a for _, a in steps] for _, steps in expected]


@pytest.mark.parametrize("variant,controller", [("gelato", "bba"), ("gelato", "robust_mpc"),
                                                ("pensieve", "bba"), ("pensieve", "rate_based")])
def test_a_classic_abr_rule_exports_and_replays_like_a_model(tmp_path, variant, controller):
    export = export_controller("abr", {"variant": variant}, controller, tmp_path / "rule")
    contract = read_contract(export)
    assert contract["policy"] == {"kind": "rule", "controller": controller}
    assert not (export / "policy.onnx").exists()
    steps, differ = _replay(export, simulated_sessions(export, n=3))
    assert steps > 0 and differ == 0


@pytest.mark.parametrize("env,controller", [
    ("cc", "constant_rate"), ("cc", "aimd"), ("cc", "cubic"), ("lb", "least_work_left"),
    ("lb", "earliest_finish"), ("lb", "join_shortest_queue"), ("lb", "round_robin")])
def test_rules_that_read_the_simulator_state_read_it_from_measurements(tmp_path, env,
                                                                       controller):
    """CC's window rules and LB's state rules bind to the session, which offers the same
    public state as the simulator; they decide as in the simulator on every step. (The
    seeded random rules draw per call, so a batch and single sessions differ by design.)"""
    export = export_controller(env, {}, controller, tmp_path / "rule")
    steps, differ = _replay(export, simulated_sessions(export, n=3))
    assert steps > 0 and differ == 0


def test_the_oracle_is_refused_outside_the_simulator(tmp_path):
    export = export_controller("cc", {}, "oracle", tmp_path / "oracle")
    with pytest.raises(ContractError, match="runs only in the simulator"):
        load_controller(export)


def test_a_plume_eval_run_exports_its_rule(tmp_path):
    import plume.harness.apps.train  # noqa: F401
    from plume.harness.apps.evaluate import run_controller

    GlobalHydra.instance().clear()
    with plume_hydra():
        cfg = compose("eval", overrides=["env=abr", "env.variant=pensieve", "controller=bba",
                                         f"paths.root={tmp_path}"])
    GlobalHydra.instance().clear()
    run_dir = tmp_path / "bba"
    run_controller(cfg, run_dir)
    export = export_run(run_dir)
    assert read_contract(export)["policy"] == {"kind": "rule", "controller": "bba"}
    assert RunDirectory(run_dir).exports()[0]["kind"] == "rule"


def test_check_parity_counts_ties_and_names_the_step_that_differs():
    reference = np.array([[1.0, 0.0], [0.5, 0.5 + 4e-6], [2.0, 3.0]], dtype=np.float32)
    rule = {"kind": "argmax", "start": 0}
    # Step 1 is a tie (gap 4e-6 <= 1e-5): another format may break it the other way.
    other = reference.copy()
    other[1] = [0.5 + 4e-6, 0.5]
    report = check_parity(reference, {"onnx": other}, rule)
    assert report["ties"] == 1 and report["formats"]["onnx"]["ties_broken_differently"] == 1
    # 2e-5 off in a step whose outputs are at most 1: beyond 1e-5 x max(1, largest |output|).
    off = reference.copy()
    off[0, 1] += 2e-5
    with pytest.raises(ParityError, match="onnx differs from PyTorch at recorded step 0"):
        check_parity(reference, {"onnx": off}, rule)
    # In a step whose largest output is 3.0 the allowance is 3e-5, on either output.
    near = reference.copy()
    near[2, 0] += 2.5e-5
    assert check_parity(reference, {"ts": near}, rule)["formats"]["ts"]["max_abs_diff"] > 2e-5


def test_gaussian_parity_compares_actions_within_the_tolerance():
    reference = np.array([[0.25], [-3.0]], dtype=np.float32)
    rule = {"kind": "clip", "low": [-1.0], "high": [1.0]}
    assert check_parity(reference, {"onnx": reference + 1e-7}, rule)["ties"] == 0
    with pytest.raises(ParityError, match="step 0"):
        check_parity(reference, {"onnx": reference + 1e-3}, rule)


def test_cc_session_turns_packets_into_the_observation_row(tmp_path):
    """By hand: 4 RTT samples over a 0.5 s MI, 60,000 B sent and 45,000 B acknowledged."""
    export = export_controller("cc", {}, "constant_rate", tmp_path / "cc")
    from plume.deploy.sessions import session_for

    session = session_for(read_contract(export))
    session.reset(initial_rate_bps=1.2e6)
    obs = session.observe({"bytes_sent": 60_000, "bytes_acked": 45_000, "bytes_lost": 15_000,
                           "send_start_s": 10.0, "send_end_s": 10.5,
                           "rtt_samples_s": [0.10, 0.10, 0.12, 0.14], "packet_size": 1500})
    # inflation (0.13 - 0.10) / 0.5 = 0.06; latency ratio 0.115 / min(0.115) = 1;
    # send ratio 60,000 / 45,000 = 4/3; the 9 older rows are empty (0, 1, 1).
    np.testing.assert_allclose(obs[0, -3:], [0.06, 1.0, 4 / 3], rtol=1e-6)
    np.testing.assert_array_equal(obs[0, :3], [0.0, 1.0, 1.0])
    # The action: Aurora's change by 0.025 a, clipped to the training clip in bit/s.
    assert session.action(np.array([4.0])) == pytest.approx(1.2e6 * 1.1)
    assert session.action(np.array([-4.0])) == pytest.approx(1.2e6 * 1.1 / 1.1)
    assert session.action(np.array([1e6])) == 1000 * 1500 * 8.0


@pytest.mark.parametrize("measurement,message", [
    ({"last": None}, "missing field next_sizes_mb"),
    ({"last": None, "next_sizes_mb": [[1.0] * 10] * 4, "next_ssim_db": [[10.0] * 10] * 5},
     "next_sizes_mb must be finite numbers of shape"),
    ({"last": {"size_mb": 1.0, "ssim_db": 12.0, "delay_s": 1.0, "buffer_s": 5.0},
      "next_sizes_mb": [[1.0] * 10] * 5, "next_ssim_db": [[10.0] * 10] * 5},
     "missing field last.stall_s"),
    ({"last": {"size_mb": "big", "ssim_db": 12.0, "delay_s": 1.0, "buffer_s": 5.0,
               "stall_s": 0.0}, "next_sizes_mb": [[1.0] * 10] * 5,
      "next_ssim_db": [[10.0] * 10] * 5}, "last.size_mb must be a number"),
    ("not a dict", "measurement must be an object"),
])
def test_bad_measurements_are_named(tmp_path, measurement, message):
    controller = load_controller(export_controller("abr", {}, "bba", tmp_path / "bba"))
    with pytest.raises(MeasurementError, match=message):
        controller.decide(measurement)


def test_unusable_exports_fail_in_one_line(tmp_path):
    with pytest.raises(ContractError, match="no contract"):
        load_controller(tmp_path)
    (tmp_path / "contract.json").write_text('{"format": "plume-controller/9"}')
    with pytest.raises(ContractError, match="format 'plume-controller/9'; this Plume reads"):
        load_controller(tmp_path)
    (tmp_path / "contract.json").write_text('{"format": "plume-controller/2"}')
    with pytest.raises(ContractError, match="missing key.s. env, observation, action"):
        load_controller(tmp_path)
    out = subprocess.run([sys.executable, "-m", "plume.harness.apps.export", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"plume-export: {tmp_path}: not a run directory (no config.yaml)"]


def test_a_bad_measurement_leaves_the_session_as_it_was(tmp_path):
    """The same good chunk after a rejected one gives the observation it gives without it."""
    export = export_controller("abr", {}, "bba", tmp_path / "bba")
    ahead = {"next_sizes_mb": [[0.1 * (j + 1) for j in range(10)]] * 5,
             "next_ssim_db": [[8.0 + j for j in range(10)]] * 5}
    chunk = {"size_mb": 1.0, "ssim_db": 14.0, "delay_s": 0.9, "buffer_s": 6.0, "stall_s": 0.0}
    clean, disturbed = load_controller(export), load_controller(export)
    for controller in (clean, disturbed):
        controller.decide({"last": None, **ahead})
        controller.decide({"last": chunk, **ahead})
    with pytest.raises(MeasurementError, match="last.buffer_s"):
        disturbed.decide({"last": {**chunk, "ssim_db": 3.0, "buffer_s": -1.0}, **ahead})
    following = {**chunk, "ssim_db": 10.0, "stall_s": 0.5}
    assert clean.decide({"last": following, **ahead}) == disturbed.decide(
        {"last": following, **ahead})
    np.testing.assert_array_equal(clean.observation, disturbed.observation)
