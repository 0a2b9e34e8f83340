"""The training loop receives its collaborators: built here from small real pieces (the user
environment of examples/custom_env, a bandit learner written below, a uniform sampler's
session), without plume-train, Hydra or a config."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from plume.agents.base import Algorithm, update_record
from plume.envs.registry import get_env
from plume.harness.config.datasets import make_env
from plume.harness.integrations.tracking import NullTracker
from plume.harness.training.consultation import PolicyConsultation
from plume.harness.training.evaluation import Evaluator, evaluate_policy
from plume.harness.training.loop import Schedule, TrainingLoop
from plume.harness.training.monitor import TrainingMonitor
from plume.harness.training.progress import Progress
from plume.harness.training.sampler_session import SamplerSession
from plume.runs.store import RunDirectory
from plume.sampling import UniformSampler

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_env" / "link_share.py"
N_ENVS, STEPS_PER_UPDATE, TOTAL = 4, 15, 1200


class MeanRewardBandit(Algorithm):
    """Plays the actions in turn and acts greedily on the best mean reward seen: a learner
    small enough to check by hand, through the Algorithm contract only."""

    CONFIG = dict

    def __init__(self, env) -> None:
        self.env, self.env_steps, self.updates = env, 0, 0
        self.n = int(env.single_action_space.n)
        self.totals, self.counts = np.zeros(self.n), np.zeros(self.n)
        self.started = False

    def learn(self, until_env_steps: int) -> list[dict]:
        if not self.started:
            self.env.reset()
            self.started = True
        records = []
        while self.env_steps < until_env_steps:
            for _ in range(STEPS_PER_UPDATE):
                action = (self.env_steps // N_ENVS) % self.n
                _, reward, *_ = self.env.step(np.full(N_ENVS, action))
                self.totals[action] += reward.sum()
                self.counts[action] += len(reward)
                self.env_steps += N_ENVS
            self.updates += 1
            records.append(update_record(self.env_steps, self.updates,
                                         **{"charts/best_action": self.best()}))
        return records

    def best(self) -> int:
        return int(np.argmax(self.totals / np.maximum(self.counts, 1)))

    def act(self, obs, deterministic=True):
        return np.full(len(obs), self.best())

    def state_dict(self):
        return {"totals": self.totals.copy(), "counts": self.counts.copy()}

    def load_state_dict(self, state):
        self.totals, self.counts = state["totals"].copy(), state["counts"].copy()

    def episode_state(self):
        return {}

    def load_episode_state(self, state):
        pass

    def greedy_policy(self):
        raise NotImplementedError("the bandit is not exported")


def test_a_loop_built_from_small_pieces_trains_evaluates_and_logs(tmp_path):
    spec = get_env("link_share", str(EXAMPLE))
    params = spec.params()
    train, test = spec.load_builtin("links", "train"), spec.load_builtin("links", "test")
    sampler = UniformSampler(len(train), np.random.default_rng(0))
    session = SamplerSession(sampler, PolicyConsultation(sampler, spec, params, train), N_ENVS,
                             train.labels)
    monitor = TrainingMonitor(make_env(spec, train, N_ENVS, session.env_sampler, mode="train",
                                       seed=0, params=params))
    agent = MeanRewardBandit(monitor)
    rundir = RunDirectory(tmp_path / "run")
    loop = TrainingLoop(agent, monitor, Evaluator(spec, {"links": test}, params), session,
                        train, rundir, NullTracker(),
                        Schedule.evenly(TOTAL, 2, seed=7, fingerprint="test"),
                        Progress(TOTAL, 0, 1e9, spec.score.unit))
    summary = loop.run()

    # 60 env steps per update: evaluations at 600 and 1200 steps, 20 updates logged.
    evals = pd.read_parquet(rundir.path / "eval.parquet")
    assert sorted(set(zip(evals["progress"], evals["env_steps"]))) == [(0.5, 600), (1.0, 1200)]
    assert len(evals) == 2 * len(test)
    lines = (rundir.path / "train.jsonl").read_text().splitlines()
    assert [json.loads(line)["env_steps"] for line in lines] == list(range(60, 1201, 60))
    # The final policy is the fixed rate with the best mean reward: the same scores as that
    # rule evaluated on its own.
    rule = evaluate_policy(lambda obs: np.full(len(obs), agent.best()), spec, {"links": test},
                           params)
    final = evals[evals["progress"] == 1.0].sort_values("trace")
    np.testing.assert_array_equal(final["score"].to_numpy(), rule["score"].to_numpy())
    assert summary["env_steps"] == TOTAL
    assert summary["eval/links/score"] == round(float(rule["score"].mean()), 6)
    # The uniform sampler's mass per kind is the kind's share of the training traces, and the
    # draws since the previous evaluation sum to one.
    weights = pd.read_parquet(rundir.path / "sampler.parquet")
    kinds = weights[(weights["grouping"] == "label") & (weights["progress"] == 1.0)]
    shares = pd.Series(train.labels).value_counts(normalize=True)
    for row in kinds.itertuples():
        assert abs(row.weight - shares[row.group]) < 1e-12
    assert abs(kinds["draw_share"].sum() - 1.0) < 1e-12
    # The checkpoint records where the schedule stands, with the fields the schedule carries.
    checkpoint = rundir.load_checkpoint()
    assert (checkpoint["env_steps"], checkpoint["progress"]) == (TOTAL, 1.0)
    assert (checkpoint["seed"], checkpoint["fingerprint"]) == (7, "test")
    assert checkpoint["agent"]["counts"].sum() == TOTAL
