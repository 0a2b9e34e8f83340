"""Every registered sampler survives pickle and deepcopy mid-training: the copy continues with
the same draws and probabilities as the original, and is independent of it (what
``SubprocVecEnv`` workers and checkpoint-by-copy rely on)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from plume.sampling import SAMPLERS

N_TRACES, N_CLUSTERS, N_FEATURES = 24, 3, 4
FAST_SCHEDULE = {"warmup": 4, "recompute_every": 4, "train_every": 4, "n_step": 5,
                 "batch_size": 2}
"""Plume-Dynamic / Trace-Error: train the predictor and recompute weights within a few draws,
so the copy carries a trained model, optimiser moments and a non-uniform distribution."""
COPIERS = {"pickle": lambda s: pickle.loads(pickle.dumps(s)), "deepcopy": copy.deepcopy}


def sampler_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The per-trace arrays ``build_sampler`` supplies (cluster inputs made by hand)."""
    memberships = rng.dirichlet(np.ones(N_CLUSTERS), size=N_TRACES)
    memberships[np.arange(N_CLUSTERS), np.arange(N_CLUSTERS)] += 5.0  # every cluster wins one
    memberships /= memberships.sum(axis=1, keepdims=True)
    return {"memberships": memberships,
            "features": rng.normal(size=(N_TRACES, N_FEATURES)),
            "mean_throughput": rng.uniform(0.5, 5.0, size=N_TRACES),
            "baseline_scores": rng.normal(size=N_TRACES),
            "reference_scores": rng.normal(1.0, size=N_TRACES)}


def build(name: str, seed: int = 0):
    """``SAMPLERS[name]`` with exactly its declared inputs, as build_sampler does."""
    cls = SAMPLERS[name]
    inputs = sampler_inputs(np.random.default_rng(100 + seed))
    params = (FAST_SCHEDULE if name in ("plume_dynamic", "trace_error") else
              {"budget_steps": 1000} if name in ("genet", "cl2") else {})
    return cls(N_TRACES, np.random.default_rng(seed),
               **{key: inputs[key] for key in cls.inputs}, **params)


def train(sampler, rounds: int, seed: int) -> list[np.ndarray]:
    """Draw a batch, report an episode per draw (rewards from their own stream), repeat;
    returns the draws and the probabilities after each round."""
    rewards_rng = np.random.default_rng(seed)
    trail = []
    for _ in range(rounds):
        drawn = sampler.sample_many(6)
        trail.append(drawn.copy())
        trail.append(sampler.probabilities().copy())
        for trace in drawn:
            rewards = rewards_rng.normal(loc=trace / N_TRACES, size=8)
            sampler.update(int(trace), rewards=rewards, value_l1=float(abs(rewards).mean()))
        trail.append(np.array([sampler.sample()]))
    return trail


@pytest.mark.parametrize("copier", sorted(COPIERS))
@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_a_copied_sampler_continues_exactly_like_the_original(name, copier):
    original = build(name)
    train(original, rounds=4, seed=1)
    clone = COPIERS[copier](original)
    assert type(clone) is type(original) and clone is not original
    np.testing.assert_array_equal(clone.probabilities(), original.probabilities())
    np.testing.assert_array_equal(clone.draws, original.draws)
    ahead_original = train(original, rounds=4, seed=2)
    ahead_clone = train(clone, rounds=4, seed=2)
    for got, expected in zip(ahead_clone, ahead_original, strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", ["plume_dynamic", "trace_error"])
def test_a_copied_return_predictor_is_trained_and_independent(name):
    original = build(name)
    train(original, rounds=4, seed=1)
    assert original.train_rounds > 0 and original.history  # the copy has real state to carry
    clone = pickle.loads(pickle.dumps(original))
    np.testing.assert_array_equal(clone.predict_returns(), original.predict_returns())
    np.testing.assert_array_equal(clone.cluster_weights(), original.cluster_weights())
    before = clone.predict_returns()
    train(original, rounds=3, seed=5)  # trains the original's model only
    assert original.train_rounds > clone.train_rounds
    np.testing.assert_array_equal(clone.predict_returns(), before)
    assert not np.array_equal(original.predict_returns(), before)


def test_the_state_dict_of_a_copy_round_trips_into_a_fresh_sampler():
    original = build("plume_dynamic")
    train(original, rounds=4, seed=1)
    fresh = build("plume_dynamic")
    fresh.load_state_dict(copy.deepcopy(original).state_dict())
    for got, expected in zip(train(fresh, 3, seed=9), train(original, 3, seed=9), strict=True):
        np.testing.assert_array_equal(got, expected)
