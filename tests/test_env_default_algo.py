"""An environment's default learner is declared once, by its EnvSpec (``algo_preset``, per
variant where it has variants): ``plume-train`` without ``algo=`` trains with that preset
(``conf/algo/auto.yaml``, resolved by the schema), exactly as ``algo=<preset>`` would, and an
``algo=`` on the command line still wins."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from plume.agents import ALGORITHMS, A2CConfig
from plume.envs.registry import ENV_PACKAGES, get_env
from plume.harness.config.schema import (
    AUTO,
    ConfigError,
    algo_section,
    env_section,
    load_algo_preset,
    resolve_algo_default,
    validate,
)
from tests.conftest import CONF_DIR, TINY, conf_options, plume_train_env

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_env"

DEFAULTS = [  # (overrides, the preset they train with)
    (["env=abr", "env.variant=pensieve"], "a2c_pensieve"),
    (["env=abr"], "a2c_gelato"),
    (["env=abr", "env.variant=gelato"], "a2c_gelato"),
    (["env=cc"], "a2c_aurora"),
    (["env=lb"], "ppo_lb"),
    (["env=tracebench"], "ppo"),
    ([], "ppo"),
]


def _items(node) -> list:
    """A config node's keys and values in order (the run fingerprint hashes them in order)."""
    return list((OmegaConf.to_container(node) if OmegaConf.is_config(node) else node).items())


@pytest.mark.parametrize("overrides,preset", DEFAULTS,
                         ids=lambda v: (" ".join(v) or "none") if isinstance(v, list) else v)
def test_without_algo_the_environment_s_preset_trains_as_if_named(compose_cfg, overrides,
                                                                   preset):
    cfg = compose_cfg(*overrides)
    assert cfg.algo.name == AUTO
    job = validate(cfg)
    named_cfg = compose_cfg(f"algo={preset}", *overrides)
    named = validate(named_cfg)
    assert job.algo_default.preset == preset and named.algo_default is None
    assert job.algo_name == named.algo_name and job.algo == named.algo
    resolve_algo_default(cfg, job)  # what the run directory's config.yaml records
    assert _items(cfg.algo) == _items(named_cfg.algo)


def test_pensieve_variant_trains_with_pensieve_s_a2c(compose_cfg):
    job = validate(compose_cfg("env=abr", "env.variant=pensieve"))
    assert job.algo_name == "a2c" and isinstance(job.algo, A2CConfig)
    assert job.algo.network == "pensieve" and list(job.algo.hidden_sizes) == [128]
    assert job.algo.learning_rate == 1e-3 and job.algo.n_steps == 15  # a2c_gelato's, inherited


def test_algo_on_the_command_line_still_wins(compose_cfg):
    job = validate(compose_cfg("env=abr", "env.variant=pensieve", "algo=ppo"))
    assert job.algo_name == "ppo" and job.algo_default is None
    assert job.algo == validate(compose_cfg("algo=ppo")).algo


def test_keys_set_without_algo_change_the_environment_s_preset(compose_cfg):
    job = validate(compose_cfg("env=abr", "env.variant=pensieve", "algo.n_steps=8",
                               "algo.hidden_sizes=[64]"))
    assert job.algo_default.preset == "a2c_pensieve"
    assert job.algo.n_steps == 8 and list(job.algo.hidden_sizes) == [64]
    assert job.algo.network == "pensieve"  # the preset's own keys stay
    with pytest.raises(ConfigError, match=r"unknown key\(s\) algo\.per; valid keys of 'algo'.*"
                                          r" \(no algo= given: env abr trains with "
                                          r"algo=a2c_gelato\)$"):
        validate(compose_cfg("env=abr", "algo.per=true"))  # a DQN key on Gelato's A2C


def test_a_user_environment_without_a_preset_trains_with_ppo(compose_cfg):
    job = validate(compose_cfg(f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", "env=link_share",
                               f"env.package={EXAMPLE / 'link_share.py'}"))
    assert job.env_spec.name == "link_share" and job.env_spec.algo_preset == "ppo"
    assert job.algo_default.preset == "ppo" and job.algo_name == "ppo"


def test_a_default_preset_conf_algo_lacks_is_one_line(compose_cfg):
    cfg = compose_cfg("env=tracebench")
    _, spec, params = env_section(cfg.env)
    with pytest.raises(ConfigError, match=r"env 'tracebench' trains with algo preset 'nope' by "
                                          r"default .*name the learner with algo=<preset>: a2c"):
        algo_section(cfg.algo, replace(spec, algo_preset="nope"), params)


@pytest.mark.parametrize("name", sorted(ENV_PACKAGES))
def test_every_environment_s_default_preset_exists(name):
    spec = get_env(name)
    variants = ([spec.params(variant=v) for v in ("gelato", "pensieve")] if name == "abr"
                else [spec.params()])
    for params in variants:
        assert (CONF_DIR / "algo" / f"{spec.default_algo(params)}.yaml").is_file()


@pytest.mark.parametrize("preset", [p for p in conf_options("algo") if p != AUTO])
def test_a_preset_loads_as_hydra_composes_it(compose_cfg, preset):
    assert _items(load_algo_preset(preset)) == _items(compose_cfg(f"algo={preset}").algo)


def test_auto_has_every_key_of_every_algorithm_unset(compose_cfg):
    auto = compose_cfg().algo  # conf/algo/auto.yaml extends schema/algo/auto, built from CONFIGs
    keys = {f.name for algo in ALGORITHMS.values() for f in fields(algo.CONFIG)}
    assert auto.name == AUTO and set(auto) == keys | {"name"}
    assert all(OmegaConf.is_missing(auto, k) for k in keys)


def test_plume_train_trains_the_pensieve_variant_with_pensieve_s_a2c(compose_cfg, tmp_path):
    """tests/test_deploy.py's a2c-pensieve budget (one update, one evaluation), no algo=."""
    tiny = [o for o in TINY if not o.startswith(("env.test_sets", "algo.", "train.total_steps",
                                                 "train.eval_points", "env.n_envs"))]
    command = [sys.executable, "-m", "plume.harness.apps.train", "env=abr", "env.variant=pensieve",
               *tiny, "logger=none", "train.eval_points=1", "env.n_envs=4",
               "analysis.k_range=[2,3]", "analysis.selection.k_end=3", "train.total_steps=64",
               f"paths.root={tmp_path}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=plume_train_env())
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = tmp_path.glob("default/*/seed=0")
    # the folder is named by the command line alone, as before: no algo in it
    assert "env.variant=pensieve,env=abr" in run.parent.name and "algo" not in run.parent.name
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "completed" and status["choices"]["algo"] == "a2c_pensieve"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert list(config["algo"].items()) == _items(compose_cfg("algo=a2c_pensieve").algo)
    assert config["algo"]["name"] == "a2c" and config["algo"]["network"] == "pensieve"


@pytest.mark.parametrize("preset, env, ratio", [("dqn", "tracebench", 1.0),
                                                ("dqn_gelato", "abr", 4.0)])
def test_a_dqn_preset_replays_each_transition_as_often_as_its_file_says(preset, env, ratio):
    """Transitions replayed per transition stored: gradient_steps x batch_size over
    train_freq x the env's copies (conf/algo/dqn.yaml: 1; dqn_gelato.yaml: 4)."""
    algo = load_algo_preset(preset)
    copies = OmegaConf.load(CONF_DIR / "env" / f"{env}.yaml").n_envs
    replayed = algo["gradient_steps"] * algo["batch_size"]
    assert replayed / (algo["train_freq"] * copies) == ratio
