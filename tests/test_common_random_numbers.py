"""Common random numbers (``train.crn``, ``plume.envs.draws``): the v-th episode on a trace
meets the same start and noise whichever sampler led there; the keyed streams are uniform and
normal; runs without it are unchanged; a run with it resumes exactly; an env that does not
declare it is refused."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from plume.envs.draws import CommonDraws, OrderedDraws
from plume.envs.registry import get_env
from plume.harness.apps.train import run_job
from plume.harness.config.schema import ConfigError, config_fingerprint, validate
from plume.sampling.base import TraceSampler
from tests.conftest import TINY


class Scripted(TraceSampler):
    """The traces of ``order`` in turn (a sampler that chooses differently from another)."""

    name = "scripted"

    def __init__(self, n_traces: int, order: list[int]) -> None:
        super().__init__(n_traces, np.random.default_rng(0))
        self.order, self.next = list(order), 0

    def sample(self) -> int:
        trace = self.order[self.next % len(self.order)]
        self.next += 1
        return trace

    def probabilities(self) -> np.ndarray:
        return np.full(self.n_traces, 1.0 / self.n_traces)


def _episodes(env_name: str, order: list[int], crn: bool, **params) -> dict[tuple, float]:
    """{(trace, visit): return} of the first len(order) training episodes of one copy playing
    action 0 throughout, its traces chosen in ``order``."""
    spec = get_env(env_name)
    env_params = spec.params(**params)
    traces = spec.load_builtin(spec.default_dataset(env_params), "train").subset(range(3))
    env = spec.make(traces, 1, Scripted(3, order), mode="train", seed=11, params=env_params)
    if crn:
        env.key_draws_by_visit()
    env.reset()
    action = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
    returns, visits = {}, {}
    for _ in range(200_000):  # bounded: every env ends an episode well before this
        *_, infos = env.step(action)
        if "episode" in infos and infos["_episode"][0]:
            trace = int(infos["episode"]["trace"][0])
            returns[(trace, visits.get(trace, 0))] = float(infos["episode"]["return"][0])
            visits[trace] = visits.get(trace, 0) + 1
            if sum(visits.values()) == len(order):
                return returns
    raise AssertionError("the episodes never ended")


ENVS = [("tracebench", {}), ("abr", {"variant": "gelato"}), ("abr", {"variant": "pensieve"}),
        ("cc", {}), ("lb", {})]
FIRST, SECOND = [0, 1, 2, 0, 1, 2], [2, 0, 1, 1, 0, 2]  # the same visits, in another order


@pytest.mark.parametrize(("env_name", "params"), ENVS, ids=lambda v: str(v))
def test_the_same_visit_of_a_trace_plays_the_same_whatever_the_sampler(env_name, params):
    keyed = _episodes(env_name, FIRST, True, **params), _episodes(env_name, SECOND, True, **params)
    assert set(keyed[0]) == set(keyed[1]) and len(keyed[0]) == 6
    assert keyed[0] == keyed[1]  # exactly: the same start and the same noise
    ordered = _episodes(env_name, FIRST, False, **params), _episodes(env_name, SECOND, False,
                                                                      **params)
    if env_name == "lb":  # LB's training draws nothing: a job sequence plays from its start
        assert ordered[0] == ordered[1] == keyed[0]
    else:  # in order of use, the draws follow the time of the visit, not the visit
        assert ordered[0] != ordered[1]


def test_a_copy_s_stream_depends_on_its_trace_and_visit_only():
    draws = CommonDraws(np.array([5, 7], dtype=np.uint64), n_traces=4, n_copies=3)
    draws.begin(np.array([0, 1, 2]), np.array([3, 3, 1]))  # two copies on trace 3 at once
    assert draws.visit.tolist() == [0, 1, 0] and draws.visits.tolist() == [0, 1, 0, 2]
    out = np.empty((2, 3))
    draws.normal(out)
    early = out.copy()
    draws.begin(np.array([2]), np.array([3]))  # trace 3's third visit, in copy 2
    other = CommonDraws(np.array([5, 7], dtype=np.uint64), n_traces=4, n_copies=3)
    other.begin(np.array([1, 0]), np.array([3, 3]))  # visits 0 and 1 in the other copies
    later = np.empty((2, 3))
    other.normal(later)
    assert later[:, 1].tolist() == early[:, 0].tolist()  # visit 0 of trace 3, copy 1 now
    assert later[:, 0].tolist() == early[:, 1].tolist()
    assert draws.visit[2] == 2 and draws.position.tolist() == [4, 4, 0]
    starts = draws.integers(np.array([10]), np.array([2]))
    assert 0 <= starts[0] < 10 and draws.position[2] == 1


def test_keyed_streams_are_uniform_and_normal():
    draws = CommonDraws(np.array([1, 2], dtype=np.uint64), n_traces=500, n_copies=500)
    draws.begin(np.arange(500), np.arange(500))
    u, z = np.empty((100, 500)), np.empty((100, 500))
    draws.random(u)
    draws.normal(z)
    assert 0 < u.min() and u.max() < 1
    assert stats.kstest(u.ravel(), "uniform").pvalue > 0.01
    assert stats.kstest(z.ravel(), "norm").pvalue > 0.01
    # neighbours in a stream and across traces are uncorrelated (50,000 pairs: |r| < 0.02)
    assert abs(np.corrcoef(u[:-1].ravel(), u[1:].ravel())[0, 1]) < 0.02
    assert abs(np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]) < 0.02
    counts = np.bincount(draws.integers(np.full(500, 7), np.arange(500)), minlength=7)
    assert counts.sum() == 500 and counts.min() > 40  # 7 values, 71 expected each


def test_ordered_draws_are_the_generator_s_own_calls():
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    draws = OrderedDraws(a)
    out = np.empty((2, 4))
    draws.normal(out)
    assert out.tolist() == b.standard_normal((2, 4)).tolist()
    copies = np.arange(3)
    assert draws.integers(np.int64(9), copies).tolist() == b.integers(0, 9, size=3).tolist()
    assert draws.integers(np.array([2, 5, 9]), copies).tolist() == b.integers(
        0, np.array([2, 5, 9])).tolist()
    assert draws.uniform(0.3, 1.5, copies).tolist() == b.uniform(0.3, 1.5, size=3).tolist()


def test_crn_is_a_distinct_job_and_the_default_keeps_every_fingerprint(compose_cfg):
    off, on = (compose_cfg(*TINY, f"train.crn={v}") for v in ("false", "true"))
    assert validate(on).train.crn and not validate(off).train.crn
    off_print = config_fingerprint(off)
    assert off_print == config_fingerprint(compose_cfg(*TINY))  # false: as before the key
    assert config_fingerprint(on) != off_print


def test_an_env_that_does_not_declare_crn_is_refused(compose_cfg, monkeypatch):
    from plume.harness.config import schema

    plain = dataclasses.replace(get_env("tracebench"), common_random_numbers=False)
    monkeypatch.setattr(schema, "get_env", lambda name, *a, **k: plain)
    with pytest.raises(ConfigError, match=r"^train\.crn: env 'tracebench' does not declare"):
        validate(compose_cfg(*TINY, "train.crn=true"))


def test_a_run_with_crn_pauses_and_resumes_exactly(compose_cfg, tmp_path):
    common = (*TINY, "logger=none", "train.crn=true", "sampler=plume_dynamic",
              "train.eval_points=4")
    run_job(compose_cfg(*common), tmp_path / "straight")
    run_job(compose_cfg(*common, "train.stop_at=0.5"), tmp_path / "resumed")
    assert json.loads((tmp_path / "resumed" / "status.json").read_text())["state"] == "paused"
    run_job(compose_cfg(*common), tmp_path / "resumed")
    straight, resumed = (pd.read_parquet(tmp_path / d / "eval.parquet")
                         for d in ("straight", "resumed"))
    pd.testing.assert_frame_equal(straight, resumed)
    off = tmp_path / "off"
    run_job(compose_cfg(*TINY, "logger=none", "sampler=plume_dynamic", "train.eval_points=4"),
            off)
    losses = [[json.loads(line)["losses/value_loss"] for line in
               (tmp_path / d / "train.jsonl").read_text().splitlines()] for d in ("straight", "off")]
    assert losses[0] != losses[1]  # the keyed draws trained on other noise than the ordered


def test_an_env_that_passes_draw_a_count_is_refused_under_keyed_draws():
    """A user env written before ids were passed (``_draw(len(ids), ...)``) keeps its ordered
    draws, and under keyed draws is stopped at its first episode start, naming the fix."""
    spec = get_env("tracebench")
    traces = spec.load_builtin("majority_fast", "train").subset(range(3))
    env = spec.make(traces, 2, None, mode="train", seed=0, params=spec.params())
    assert env._draw(2, np.full(3, 5), False)[1].shape == (2,)  # ordered: a count is enough
    env.key_draws_by_visit()
    with pytest.raises(TypeError, match="passes _draw a count: draws keyed by visit"):
        env._draw(2, np.full(3, 5), False)
