"""TSCL learning-progress sampler (``tscl``) and Genet's CL2 curriculum (``cl2``)."""

from __future__ import annotations

import copy
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plume.sampling.curriculum import DifficultyCurriculumSampler, difficulty_bins
from plume.sampling.progress import LearningProgressSampler, window_slope


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def tscl(labels, seed=0, **kw) -> LearningProgressSampler:
    labels = np.asarray(labels)
    return LearningProgressSampler(labels.size, rng(seed), labels, **kw)


def feed(sampler, trace, scores):
    """One episode per score, each a constant reward array (so its per-step mean is the score)."""
    for s in scores:
        sampler.update(trace, np.full(5, float(s)))


def cl2(difficulty, seed=0, budget_steps=100, **kw) -> DifficultyCurriculumSampler:
    d = np.asarray(difficulty, dtype=np.float64)
    base = np.linspace(-1.0, 1.0, d.size)
    return DifficultyCurriculumSampler(d.size, rng(seed), base, base + d,
                                       budget_steps=budget_steps, **kw)


# ------------------------------------------------------------------------------------------------
# TSCL
# ------------------------------------------------------------------------------------------------
def test_window_slope_hand_values_and_polyfit():
    assert window_slope([(0, 1.0), (1, 2.0), (2, 3.0)]) == pytest.approx(1.0, abs=1e-12)
    # x mean 1, y mean 7/3: sum dx*dy = 4/3 + 5/3 = 3, sum dx^2 = 2
    pts = [(0, 1.0), (1, 2.0), (2, 4.0)]
    assert window_slope(pts) == pytest.approx(1.5, abs=1e-12)
    x, y = np.array(pts).T
    assert window_slope(pts) == pytest.approx(np.polyfit(x, y, 1)[0], abs=1e-12)
    assert math.isnan(window_slope([(0, 1.0)]))


def test_scores_are_per_step_means_and_slopes_per_cluster():
    s = tscl([0, 0, 1, 1])
    s.update(0, np.ones(4))  # mean 1
    s.update(1, np.full(2, 2.0))  # mean 2, half as long
    s.update(0, np.array([3.0]))  # mean 3
    s.update(2, np.array([0.0, 10.0]))  # mean 5
    assert list(s.windows[0]) == [(0, 1.0), (1, 2.0), (2, 3.0)]
    slopes = s.slopes()
    assert slopes[0] == pytest.approx(1.0, abs=1e-12)
    assert math.isnan(slopes[1])  # one point: too few
    assert s.cluster_episodes.tolist() == [3, 1]
    assert s.episodes.tolist() == [2, 1, 1, 0]


def test_boltzmann_masses_match_hand_calculation():
    labels = [0, 0, 1, 1, 1]
    s = tscl(labels, temperature=0.2, epsilon=0.1)
    feed(s, 0, [1, 2, 3])  # slope 1
    feed(s, 2, [1, 0.5, 0])  # slope -0.5: priority uses |slope|
    np.testing.assert_allclose(s.slopes(), [1.0, -0.5], atol=1e-12)
    # s = max|slope| = 1: logits 1/0.2 = 5 and 0.5/0.2 = 2.5
    m1 = math.exp(-2.5) / (1 + math.exp(-2.5))
    np.testing.assert_allclose(s.cluster_probabilities(), [1 - m1, m1], atol=1e-12)
    prio = np.array([(1 - m1) / 2] * 2 + [m1 / 3] * 3)
    np.testing.assert_allclose(s.prioritised_probabilities(), prio, atol=1e-12)
    np.testing.assert_allclose(s.probabilities(), 0.9 * prio + 0.1 / 5, atol=1e-12)

    hot = tscl(labels, temperature=1.0)
    feed(hot, 0, [1, 2, 3])
    feed(hot, 2, [1, 0.5, 0])
    e = np.exp([1.0, 0.5])
    np.testing.assert_allclose(hot.cluster_probabilities(), e / e.sum(), atol=1e-12)


def test_temperature_is_unit_free():
    a, b = tscl([0, 1], temperature=0.3), tscl([0, 1], temperature=0.3)
    for sampler, scale in ((a, 1.0), (b, 1e4)):
        feed(sampler, 0, [scale * v for v in (0, 1, 3)])
        feed(sampler, 1, [scale * v for v in (2, 2.5, 2)])
    np.testing.assert_allclose(a.cluster_probabilities(), b.cluster_probabilities(), atol=1e-12)


def test_under_visited_clusters_get_all_the_mass_equally():
    s = tscl([0, 1, 1, 2], epsilon=0.2, min_episodes=3)
    np.testing.assert_allclose(s.cluster_probabilities(), [1 / 3] * 3)
    feed(s, 0, [5, 1, 7])  # cluster 0 has 3 points and a big slope, but others are unexplored
    feed(s, 1, [0])
    np.testing.assert_allclose(s.cluster_probabilities(), [0.0, 0.5, 0.5])
    np.testing.assert_allclose(s.prioritised_probabilities(), [0.0, 0.25, 0.25, 0.5])
    assert s.probabilities()[0] == pytest.approx(0.2 / 4, abs=1e-15)  # only the floor
    feed(s, 3, [0, 0, 0])
    np.testing.assert_allclose(s.cluster_probabilities(), [0.0, 1.0, 0.0])  # 1 still short
    feed(s, 1, [0, 0])  # cluster 1 flat; cluster 2 flat; cluster 0 slope 1
    z = np.exp(np.array([1.0, 0.0, 0.0]) / 0.2)
    np.testing.assert_allclose(s.cluster_probabilities(), z / z.sum(), atol=1e-12)


def test_all_flat_clusters_share_equally():
    s = tscl([0, 1, 1])
    feed(s, 0, [2, 2, 2])
    feed(s, 1, [-1, -1])
    np.testing.assert_allclose(s.cluster_probabilities(), [0.5, 0.5])
    np.testing.assert_allclose(s.prioritised_probabilities(), [0.5, 0.25, 0.25])


def test_window_evicts_the_oldest_episode():
    s = tscl([0, 1], window=3)
    feed(s, 0, [10, 1, 2])
    assert s.slopes()[0] == pytest.approx(np.polyfit([0, 1, 2], [10, 1, 2], 1)[0], abs=1e-12)
    feed(s, 0, [3])
    assert list(s.windows[0]) == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert s.slopes()[0] == pytest.approx(1.0, abs=1e-12)


def test_epsilon_floor_and_sum():
    s = tscl([0, 0, 0, 1], epsilon=0.25)
    feed(s, 0, [0, 1])
    feed(s, 3, [0, 0])
    p = s.probabilities()
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert p.min() >= 0.25 / 4 - 1e-15
    np.testing.assert_allclose(p, 0.75 * s.prioritised_probabilities() + 0.25 / 4, atol=1e-15)


def test_draws_follow_probabilities():
    s = tscl([0, 0, 1, 1, 1, 2], temperature=0.2, epsilon=0.05)
    feed(s, 0, [0, 1, 2])
    feed(s, 2, [0, 0.3, 0.6])
    feed(s, 5, [1, 1, 1])
    p = s.probabilities()
    n = 200_000
    freq = np.bincount(s.sample_many(n), minlength=6) / n
    tol = 5 * np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(freq - p) <= tol)
    assert np.max(np.abs(p - 1 / 6)) > 20 * tol.max()  # a uniform sampler could not pass
    assert s.uniform_draws + s.prioritised_draws == n


def test_soft_cluster_without_argmax_gets_no_mass():
    memberships = np.array([[0.6, 0.1, 0.3], [0.2, 0.5, 0.3], [0.5, 0.2, 0.3]])
    s = LearningProgressSampler(3, rng(), memberships)
    assert s.clusters.tolist() == [0, 1, 0] and s.cluster_sizes.tolist() == [2, 1, 0]
    np.testing.assert_allclose(s.cluster_probabilities(), [0.5, 0.5, 0.0])
    feed(s, 0, [0, 1])
    feed(s, 1, [0, 3])  # empty cluster 2 never counts as "under-visited"
    z = np.exp(np.array([1 / 3, 1.0]) / 0.2)
    np.testing.assert_allclose(s.cluster_probabilities(), [*(z / z.sum()), 0.0], atol=1e-12)
    with pytest.raises(ValueError, match="no traces"):
        tscl([0, 2, 2])  # 1-D labels go through as_labels


@pytest.mark.parametrize("params", [{"temperature": 0.0}, {"min_episodes": 1},
                                    {"window": 3, "min_episodes": 4}, {"epsilon": 1.5},
                                    {"window": 2.5}])
def test_tscl_rejects_bad_parameters(params):
    with pytest.raises(ValueError):
        tscl([0, 1], **params)


def test_tscl_rejects_bad_episodes_and_skips_empty_ones():
    s = tscl([0, 1])
    with pytest.raises(ValueError, match="trace 1"):
        s.update(1, np.array([1.0, np.nan]))
    with pytest.raises(IndexError):
        s.update(2, np.ones(3))
    s.update(0, np.array([]))
    assert s.skipped_episodes == 1 and s.episodes.tolist() == [1, 0] and not s.windows[0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=4, max_size=10),
       st.lists(st.tuples(st.integers(0, 9), st.floats(-1e6, 1e6), st.integers(1, 4)),
                max_size=30),
       st.floats(0.0, 1.0), st.floats(0.01, 5.0))
def test_tscl_probabilities_always_valid(labels, episodes, eps, temperature):
    labels = np.unique(labels, return_inverse=True)[1]  # no empty clusters
    s = tscl(labels, epsilon=eps, temperature=temperature, window=4)
    for trace, score, length in episodes:
        s.update(trace % labels.size, np.full(length, score))
        p = s.probabilities()
        assert p.sum() == pytest.approx(1.0, abs=1e-9)
        assert np.all(p >= eps / labels.size - 1e-12)
        assert s.cluster_probabilities().sum() == pytest.approx(1.0, abs=1e-9)


# ------------------------------------------------------------------------------------------------
# CL2
# ------------------------------------------------------------------------------------------------
DIFFICULTY = [5, 1, 3, 1, 0, 9, 3, 2, 7, 1]
"""Ranks (stable, ties by index): 4, 1, 3, 9, 7, 2, 6, 0, 8, 5; bin = rank // 2."""
BINS = [3, 0, 2, 1, 0, 4, 3, 2, 4, 1]

PUBLISHED = [
    [1.0, 0, 0, 0, 0],
    [0.7, 0.3, 0, 0, 0],
    [0.49, 0.21, 0.30, 0, 0],
    [0.343, 0.147, 0.21, 0.30, 0],
    [0.2401, 0.1029, 0.147, 0.21, 0.30],
]


def test_bins_by_difficulty_rank_with_ties():
    s = cl2(DIFFICULTY)
    np.testing.assert_array_equal(s.difficulty, DIFFICULTY)
    assert s.bins.tolist() == BINS
    assert s.clusters.tolist() == BINS
    assert s.bin_sizes.tolist() == [2] * 5
    assert difficulty_bins(np.zeros(7)).tolist() == [0, 0, 1, 2, 2, 3, 4]  # 5r // 7


@pytest.mark.parametrize("level", range(5))
def test_published_level_probabilities(level):
    probs = DifficultyCurriculumSampler.level_probabilities(level)
    np.testing.assert_allclose(probs, PUBLISHED[level], rtol=0, atol=1e-12)
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError):
        DifficultyCurriculumSampler.level_probabilities(5)


def test_level_advances_every_fifth_of_the_budget():
    s = cl2(DIFFICULTY, budget_steps=100)
    levels = []
    for length in [19, 1, 19, 1, 20, 19, 1, 500]:  # cumulative 19, 20, 39, 40, 60, 79, 80, 580
        s.update(0, np.zeros(length))
        levels.append(s.level)
    assert levels == [0, 1, 1, 2, 3, 3, 4, 4]
    assert s.steps_seen == 580
    odd = cl2(DIFFICULTY, budget_steps=7)  # level = floor(5 s / 7)
    assert [odd.level_at(k) for k in range(9)] == [0, 0, 1, 2, 2, 3, 4, 4, 4]


def test_trace_probabilities_are_bin_mass_over_bin_size():
    s = cl2(DIFFICULTY, budget_steps=10, epsilon=0.1)
    np.testing.assert_allclose(s.prioritised_probabilities(), np.isin(BINS, [0]) / 2)
    s.update(3, np.zeros(4))  # 4 of 10 steps: level 2
    assert s.level == 2
    expected = np.array(PUBLISHED[2])[BINS] / 2
    np.testing.assert_allclose(s.prioritised_probabilities(), expected, atol=1e-12)
    np.testing.assert_allclose(s.probabilities(), 0.9 * expected + 0.01, atol=1e-12)
    np.testing.assert_allclose(s.trace_probabilities(4), np.array(PUBLISHED[4])[BINS] / 2,
                               atol=1e-12)


def test_level_zero_draws_only_the_easiest_bin():
    s = cl2(DIFFICULTY)
    assert set(s.sample_many(2000).tolist()) == {1, 4}


def test_empty_bins_are_renormalised_away():
    s = cl2([2.0, 0.0, 1.0])  # ranks 2, 0, 1 -> bins floor(5r/3): 3, 0, 1
    assert s.bins.tolist() == [3, 0, 1] and s.bin_sizes.tolist() == [1, 1, 0, 1, 0]
    expected = {
        0: [1, 0, 0, 0, 0],
        1: [0.7, 0.3, 0, 0, 0],
        2: [0.7, 0.3, 0, 0, 0],  # bin 2 empty: [0.49, 0.21] / 0.7
        3: [0.343 / 0.79, 0.147 / 0.79, 0, 0.3 / 0.79, 0],
        4: [0.2401 / 0.553, 0.1029 / 0.553, 0, 0.21 / 0.553, 0],
    }
    for level, bins in expected.items():
        np.testing.assert_allclose(s.bin_probabilities(level), bins, atol=1e-12)
        probs = s.trace_probabilities(level)
        np.testing.assert_allclose(probs, np.array(bins)[[3, 0, 1]], atol=1e-12)
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)


def test_single_trace_works():
    s = cl2([4.0], budget_steps=1)
    s.update(0, np.ones(3))
    assert s.level == 4 and s.sample() == 0 and s.probabilities().tolist() == [1.0]


def test_non_finite_scores_name_the_trace():
    base, ref = np.zeros(4), np.ones(4)
    with pytest.raises(ValueError, match=r"baseline_scores.*trace 2"):
        DifficultyCurriculumSampler(4, rng(), np.array([0, 0, np.nan, 0]), ref, budget_steps=10)
    with pytest.raises(ValueError, match=r"reference_scores.*trace 0"):
        DifficultyCurriculumSampler(4, rng(), base, np.array([np.inf, 1, 1, 1]), budget_steps=10)
    with pytest.raises(ValueError, match="3 values"):
        DifficultyCurriculumSampler(4, rng(), base[:3], ref, budget_steps=10)


def test_cl2_parameters_and_provenance():
    s = cl2(DIFFICULTY, baseline="bba", reference=None)
    assert (s.baseline, s.reference, s.epsilon) == ("bba", None, 0.0)
    with pytest.raises(ValueError):
        cl2(DIFFICULTY, budget_steps=0)
    with pytest.raises(TypeError):
        cl2(DIFFICULTY, baseline=3)
    with pytest.raises(IndexError):
        s.update(10, np.ones(2))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30), st.integers(0, 4),
       st.floats(0.0, 1.0))
def test_cl2_probabilities_always_valid(difficulty, level, eps):
    s = cl2(difficulty, epsilon=eps, budget_steps=5)
    s.update(0, np.zeros(level))
    assert s.level == level
    sizes = s.bin_sizes[s.bin_sizes > 0] if len(difficulty) < 5 else s.bin_sizes
    assert sizes.max() - sizes.min() <= 1
    p = s.probabilities()
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(p >= eps / len(difficulty) - 1e-15)
    order = np.argsort(s.difficulty, kind="stable")
    assert np.all(np.diff(s.bins[order]) >= 0)  # harder, never lower


# ------------------------------------------------------------------------------------------------
# both: persistence and copies
# ------------------------------------------------------------------------------------------------
def build(name: str, seed: int):
    if name == "tscl":
        return tscl(np.arange(12) % 3, seed=seed, window=4)
    return cl2(np.arange(12.0)[::-1], seed=seed, budget_steps=60, epsilon=0.1)


def train(sampler, rounds: int, seed: int):
    """Draw, report each drawn episode with rewards from their own stream; returns a trail."""
    gen = np.random.default_rng(seed)
    trail = []
    for _ in range(rounds):
        drawn = sampler.sample_many(4)
        trail += [drawn.copy(), sampler.probabilities().copy()]
        for trace in drawn:
            sampler.update(int(trace), gen.normal(trace / 12, size=int(gen.integers(1, 4))))
        trail.append(np.array([sampler.sample()]))
    return trail


def assert_same_trail(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", ["tscl", "cl2"])
def test_state_dict_round_trip(name):
    original = build(name, seed=1)
    train(original, 5, seed=2)
    original.sample_many(3)
    state = original.state_dict()
    fresh = build(name, seed=99)
    fresh.load_state_dict(state)
    np.testing.assert_array_equal(fresh.probabilities(), original.probabilities())
    assert [fresh.sample() for _ in range(100)] == [original.sample() for _ in range(100)]
    assert_same_trail(train(fresh, 10, seed=3), train(original, 10, seed=3))
    np.testing.assert_array_equal(fresh.draws, original.draws)
    np.testing.assert_array_equal(fresh.episodes, original.episodes)
    with pytest.raises(ValueError):
        build("cl2" if name == "tscl" else "tscl", 0).load_state_dict(state)


@pytest.mark.parametrize("copier", [lambda s: pickle.loads(pickle.dumps(s)), copy.deepcopy],
                         ids=["pickle", "deepcopy"])
@pytest.mark.parametrize("name", ["tscl", "cl2"])
def test_copies_continue_identically(name, copier):
    original = build(name, seed=4)
    train(original, 4, seed=5)
    clone = copier(original)
    assert_same_trail(train(clone, 8, seed=6), train(original, 8, seed=6))
    clone.update(0, np.ones(50))  # independent of the original
    assert clone.episodes.sum() == original.episodes.sum() + 1
