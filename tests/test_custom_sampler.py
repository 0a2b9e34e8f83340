"""The sampler plug-in contract: every sampler declares its options (``CONFIG``) and needs
(``NEEDS``), the schema checks ``sampler.*`` against them, and a sampler of the user's own
(examples/my_sampler.py) trains from the command line like a built-in one."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from plume.harness.config.errors import ConfigError
from plume.harness.config.schema import resolve_sampler_defaults, sampler_section, validate
from plume.sampling import (
    SAMPLERS,
    SamplerNeeds,
    TraceSampler,
    UniformSampler,
    register_sampler,
)
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_sampler.py"


def test_the_example_fits_in_under_40_lines():
    assert len(EXAMPLE.read_text().splitlines()) < 40


def test_plume_train_trains_a_user_sampler_from_the_command_line(tmp_path):
    command = [sys.executable, "-m", "plume.harness.apps.train", *TINY, "logger=none",
               f"paths.root={tmp_path}", f"sampler.package={EXAMPLE.relative_to(ROOT)}",
               "sampler.name=low_throughput", "+sampler.temperature=0.5"]
    done = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = tmp_path.glob("default/*/seed=0")
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    recorded = yaml.safe_load((run / "config.yaml").read_text())["sampler"]
    assert recorded == {"name": "low_throughput", "package": "examples/my_sampler.py",
                        "temperature": 0.5, "epsilon": 0.1}  # its defaults written in
    weights = pd.read_parquet(run / "sampler.parquet")
    trained = weights[weights["progress"] > 0]
    assert len(trained) > 0
    for _, rows in trained.groupby(["progress", "grouping"]):  # the draws were recorded
        assert rows["draw_share"].sum() == pytest.approx(1.0)
    share = trained["n_traces"] / trained.groupby(["progress", "grouping"])["n_traces"].transform(
        "sum")
    assert (trained["weight"] - share).abs().max() > 0.01  # not uniform: it prefers some


def test_a_sampler_option_out_of_range_names_its_key(compose_cfg):
    with pytest.raises(ConfigError, match=r"sampler\.alpha: .*alpha must be in \[0, 1\]"):
        validate(compose_cfg("sampler=plume_dynamic", "sampler.alpha=1.5"))
    with pytest.raises(ConfigError, match=r"sampler\.min_episodes: .*<= window"):
        validate(compose_cfg("sampler=tscl", "sampler.window=3", "sampler.min_episodes=4"))
    with pytest.raises(ConfigError, match="sampler 'trace_error' has no parameter.s. alpha"):
        validate(compose_cfg("sampler=trace_error", "+sampler.alpha=0.5"))


def test_a_user_package_that_fails_is_one_line_naming_its_file(tmp_path):
    broken = tmp_path / "broken_sampler.py"
    broken.write_text("import numpy\n\nraise RuntimeError('no luck')\n")
    with pytest.raises(ConfigError, match=r"failed to import: RuntimeError: no luck "
                                          r"\(.*broken_sampler.py:3\)"):
        sampler_section({"name": "broken", "package": str(broken)})
    with pytest.raises(ConfigError, match="sampler.name='nowhere' is not known.*sampler.package"):
        sampler_section({"name": "nowhere"})


@pytest.mark.parametrize("name", sorted(n for n in SAMPLERS if n != "genet"))
def test_every_sampler_config_file_composes_to_its_config_defaults(compose_cfg, name):
    # genet.yaml repeats its values (a test of its own compares them with the class)
    chosen, config = sampler_section(compose_cfg(f"sampler={name}").sampler)
    cls = SAMPLERS[name]
    assert chosen == name and type(config) is cls.CONFIG
    expected = {f.name: f.default for f in dataclasses.fields(cls.CONFIG)
                if f.init and f.default is not dataclasses.MISSING}
    assert {k: v for k, v in dataclasses.asdict(config).items() if k in expected} == expected


def test_config_yaml_gets_the_options_a_sampler_takes_and_validates_again(compose_cfg):
    cfg = compose_cfg("sampler=trace_error", "~sampler.warmup")
    job = validate(cfg)
    resolve_sampler_defaults(cfg, job)
    assert cfg.sampler.warmup == 2250 and "alpha" not in cfg.sampler  # pinned, not an option
    assert validate(cfg).sampler == job.sampler


def test_every_sampler_declares_its_options_and_needs():
    for cls in SAMPLERS.values():
        assert dataclasses.is_dataclass(cls.CONFIG) and isinstance(cls.NEEDS, SamplerNeeds)
        assert cls.inputs == cls.NEEDS.inputs
    genet = SAMPLERS["genet"]
    assert genet.needs(genet.CONFIG(budget_steps=1000, rounds=9)).policy_every == 100
    plr = SAMPLERS["plr"]
    assert plr.needs(plr.CONFIG()).learner_signal
    assert not plr.needs(plr.CONFIG(score="return_delta")).learner_signal
    uniform = UniformSampler(3, np.random.default_rng(0))  # the optional hooks are no-ops
    assert uniform.evaluation_every == 0 and uniform.evaluation_traces().size == 0
    assert uniform.observe_policy(np.arange(3), np.zeros(3)) is None
    assert uniform.weight_updates() == []


def test_register_sampler_refuses_what_the_harness_could_not_use():
    class Taken(UniformSampler):
        name = "uniform"

    class BadName(UniformSampler):
        name = "Bad Name"

    with pytest.raises(ValueError, match="'uniform' is taken"):
        register_sampler(Taken)
    with pytest.raises(ValueError, match="plain lower-case name"):
        register_sampler(BadName)
    with pytest.raises(TypeError, match="CONFIG must be a dataclass"):
        type("NoDataclass", (UniformSampler,), {"CONFIG": dict})
    with pytest.raises(TypeError, match="declare NEEDS"):
        type("Old", (UniformSampler,), {"inputs": ("memberships",)})
    assert register_sampler(UniformSampler) is UniformSampler
    assert issubclass(SAMPLERS["uniform"], TraceSampler)


def test_no_sampling_module_imports_a_private_name():
    for path in (ROOT / "plume" / "sampling").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"
