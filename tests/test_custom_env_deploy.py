"""An environment of a user's own (examples/custom_env) deploys touching only its own files: its
spec declares its contract (``deployment``), its session and its recorder (``deploy``) in files
of its folder; a tiny run of it is exported by plume-export's path, served by the torch-free
runtime given that spec, and replayed exactly: every decision and every rebuilt observation is
the simulator's. A contract alone never imports the user's module."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from plume.deploy import load_controller
from plume.deploy.contract import ContractError, read_contract
from plume.deploy.replay import simulated_sessions
from plume.envs.registry import get_env
from plume.harness.apps.export import export_run
from plume.harness.apps.train import run_job
from tests.conftest import ONE_THREAD, compose_train

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_env"
PACKAGE = EXAMPLE / "deployable.py"
TRAIN = [f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", "env=link_share",
         f"env.package={PACKAGE}", "sampler=uniform", "logger=none", "train.total_steps=64",
         "train.eval_points=1", "train.progress_every_s=0", "env.n_envs=4", "algo.n_steps=16",
         "algo.n_minibatches=2", "algo.n_epochs=1", "algo.hidden_sizes=[16]",
         "analysis.k_range=[2,3]", "analysis.selection.k_end=3"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(the user's spec, the export of a tiny run of its environment)."""
    root = tmp_path_factory.mktemp("custom_deploy")
    run_dir = root / "run"
    run_job(compose_train(*TRAIN, f"paths.root={root}", f"paths.cache={root / 'cache'}"),
            run_dir)
    return get_env("link_share", str(PACKAGE)), export_run(run_dir)


def test_the_slices_live_in_the_example_folder_and_plume_names_no_part_of_it(exported):
    spec, _ = exported
    deployment = spec.deployment_for(None)
    for part in (spec.make, spec.deployment, deployment.session, deployment.recorder):
        assert Path(inspect.getsourcefile(part)).resolve().parent == EXAMPLE, part
    plume_sources = [p for p in (ROOT / "plume").rglob("*.py") if "link_share" in p.read_text()]
    assert plume_sources == []


def test_the_export_is_served_with_its_spec_and_replays_the_simulator_exactly(exported):
    spec, export = exported
    contract = read_contract(export)
    assert contract["env"]["name"] == "link_share" and contract["policy"]["kind"] == "model"
    assert contract["constants"] == {"rates_mbps": [1.0, 2.0, 4.0, 8.0]}
    controller = load_controller(export, spec=spec)
    seen: list[np.ndarray] = []

    def recording(obs: np.ndarray) -> np.ndarray:
        seen.append(np.array(obs))
        return controller.act_observation(obs)

    sessions = simulated_sessions(export, n=5, policy=recording, spec=spec)
    assert len(sessions) == 5 and all(len(s.steps) == 60 for s in sessions)
    decisions = set()
    for i, session in enumerate(sessions):
        controller.reset(**session.reset_kwargs)
        for k, step in enumerate(session.steps):
            assert controller.decide(step.measurement) == step.action
            np.testing.assert_array_equal(controller.observation[0], seen[k][i])
            decisions.add(step.action)
    assert decisions <= {1.0, 2.0, 4.0, 8.0}


def test_a_contract_alone_imports_nothing_of_the_user(exported, tmp_path):
    """Without the spec, a fresh runtime serves observations only and imports no module of
    the example (nor torch): the contract's env name selects nothing it could run."""
    _, export = exported
    script = textwrap.dedent(f"""
        import json, sys
        from plume.deploy import load_controller
        from plume.deploy.contract import ContractError
        controller = load_controller({str(export)!r})
        try:
            controller.decide({{"delivered_mbit": 1.0, "sent_mbit": 1.0, "lost_mbit": 0.0}})
            refused = ""
        except ContractError as err:
            refused = str(err)
        user = sorted(name for name, module in sys.modules.items()
                      if {str(EXAMPLE)!r} in str(getattr(module, "__file__", None)))
        actions = controller.act_observation([[1.0, 1.0, 0.0]]).tolist()
        print(json.dumps([refused, user, "torch" in sys.modules, actions]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**ONE_THREAD, "PATH": "/usr/bin:/bin"},
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    refused, user, torch_loaded, actions = json.loads(done.stdout)
    assert "no deployment session for env=link_share" in refused
    assert user == [] and not torch_loaded and len(actions) == 1


def test_a_spec_of_another_environment_is_refused(exported):
    _, export = exported
    with pytest.raises(ContractError, match="an export of env 'link_share', not of the spec "
                                            "passed \\('lb'\\)"):
        load_controller(export, spec=get_env("lb"))
