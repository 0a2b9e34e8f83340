"""Trace samplers: base samplers, Plume's weight formulas, Plume-Static/Dynamic, peers."""

from __future__ import annotations

import inspect
import io
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from plume.sampling import (
    SAMPLERS,
    ClusterUniformSampler,
    PlumeDynamicSampler,
    PlumeStaticSampler,
    PrioritizedLevelReplaySampler,
    SequentialSampler,
    TraceErrorSampler,
    TwoClassSampler,
    UniformSampler,
    WorstCaseSampler,
)
from plume.sampling.peers import plr_replay_distribution
from plume.sampling.plume import standardise_features
from plume.sampling.weights import (
    cluster_mass_soft,
    cluster_weights_hard,
    cluster_weights_soft,
    minmax_scale,
)

GAMMA_SUM_10 = sum(0.999**t for t in range(10))


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def one_hot(labels, k=None):
    labels = np.asarray(labels)
    k = labels.max() + 1 if k is None else k
    return np.eye(k)[labels]


def small_dynamic(n=40, k=2, seed=0, **kw):
    """A fast Plume-Dynamic: 2 clusters of n/2 traces, a feature that separates them."""
    labels = np.arange(n) % k
    feats = np.column_stack([labels + 0.01 * np.arange(n) / n, np.ones(n)])  # 2nd is constant
    params = {"n_step": 10, "train_every": 20, "cluster_history": 50, "recompute_every": 20,
              "warmup": 40, "batch_size": 8, "torch_seed": seed}
    params.update(kw)
    return PlumeDynamicSampler(n, rng(seed), one_hot(labels, k), feats, **params), labels


def run_episodes(sampler, labels, reward_fn, episodes, gen):
    drawn = []
    for _ in range(episodes):
        i = sampler.sample()
        drawn.append(i)
        sampler.update(i, reward_fn(labels[i], gen))
    return np.array(drawn)


# ------------------------------------------------------------------------------------------------
# base samplers
# ------------------------------------------------------------------------------------------------
def test_uniform_counts_and_chi_square():
    s = UniformSampler(10, rng(1))
    draws = s.sample_many(100_000)
    extra = [s.sample() for _ in range(500)]
    assert s.draws.sum() == 100_500
    np.testing.assert_array_equal(
        s.draws, np.bincount(np.concatenate([draws, extra]), minlength=10)
    )
    counts = np.bincount(draws, minlength=10)
    chi2 = ((counts - 10_000) ** 2 / 10_000).sum()
    assert chi2 < 27.88  # df 9, p = 0.001
    np.testing.assert_allclose(s.probabilities(), 0.1)


def test_sequential_wraps_and_counts():
    s = SequentialSampler(4)
    assert s.sample_many(6).tolist() == [0, 1, 2, 3, 0, 1]
    assert s.sample() == 2
    assert s.draws.tolist() == [2, 2, 2, 1]
    assert s.probabilities().tolist() == [0, 0, 0, 1]


# ------------------------------------------------------------------------------------------------
# weight formulas
# ------------------------------------------------------------------------------------------------
def test_hard_weights_hand_example():
    labels = np.array([0, 0, 1, 1, 1])
    np.testing.assert_allclose(cluster_weights_hard(labels), [1 / 4, 1 / 4, 1 / 6, 1 / 6, 1 / 6])
    pools = np.array([3.0, 1.0])
    np.testing.assert_allclose(cluster_weights_hard(labels, pools),
                               [3 / 8, 3 / 8, 1 / 12, 1 / 12, 1 / 12])
    assert pools.tolist() == [3.0, 1.0]  # not normalised in place (the reference's bug)


def test_soft_weights_hand_example():
    dist = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [0.0, 1.0]])
    before = dist.copy()
    # prop = [1.5, 2.5] / 4, adjustment = 0.5 / prop = [4/3, 4/5]
    p = cluster_weights_soft(dist)
    np.testing.assert_allclose(p, [1 / 3, 4 / 15, 1 / 5, 1 / 5])
    np.testing.assert_allclose(cluster_mass_soft(p, dist), [0.5, 0.5])
    pools = np.array([1.0, 3.0])
    p = cluster_weights_soft(dist, pools)
    np.testing.assert_allclose(cluster_mass_soft(p, dist, pools), [0.25, 0.75])
    np.testing.assert_array_equal(dist, before)
    assert pools.tolist() == [1.0, 3.0]


def test_soft_on_one_hot_equals_hard():
    labels = np.array([0, 1, 1, 2, 2, 2, 0])
    pools = [0.2, 0.5, 0.3]
    np.testing.assert_allclose(cluster_weights_soft(one_hot(labels), pools),
                               cluster_weights_hard(labels, pools))


@st.composite
def memberships_and_pools(draw):
    k = draw(st.integers(1, 4))
    n = draw(st.integers(k, 12))
    dist = draw(hnp.arrays(np.float64, (n, k), elements=st.floats(0.0, 1.0)))
    dist[np.arange(n), np.arange(n) % k] += 0.05  # every row and column has mass
    pools = draw(hnp.arrays(np.float64, (k,), elements=st.floats(0.01, 10.0)))
    return dist, pools


@settings(max_examples=60, deadline=None)
@given(memberships_and_pools())
def test_cluster_mass_proportional_to_pools(case):
    dist, pools = case
    dist_before, pools_before = dist.copy(), pools.copy()
    p = cluster_weights_soft(dist, pools)
    assert p.min() >= 0 and np.isclose(p.sum(), 1.0)
    np.testing.assert_allclose(cluster_mass_soft(p, dist, pools), pools / pools.sum(), atol=1e-9)
    labels = np.arange(dist.shape[0]) % dist.shape[1]  # a hard labelling with no empty cluster
    ph = cluster_weights_hard(labels, pools)
    mass = np.bincount(labels, weights=ph, minlength=dist.shape[1])
    np.testing.assert_allclose(mass, pools / pools.sum(), atol=1e-12)
    np.testing.assert_array_equal(dist, dist_before)
    np.testing.assert_array_equal(pools, pools_before)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: cluster_weights_hard(np.array([0, 0, 2, 2])), r"cluster\(s\) \[1\] have no traces"),
        (lambda: cluster_weights_hard(np.array([0, 1]), [0.0, 0.0]), "sum to a positive"),
        (lambda: cluster_weights_hard(np.array([0, 1]), [1.0, -1.0]), "non-negative"),
        (lambda: cluster_weights_hard(np.array([0, 1]), [1.0, 1.0, 1.0]), "no traces"),
        (lambda: cluster_weights_hard(np.array([0, 3]), [1.0, 1.0]), "out of range"),
        (lambda: cluster_weights_soft(np.array([[1.0, 0.0], [1.0, 0.0]])), "zero membership mass"),
        (lambda: cluster_weights_soft(np.array([[1.0, 0.0], [0.0, 1.0]]), [1.0]), "shape"),
        (lambda: cluster_weights_soft(np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])),
         "belong to no cluster"),
        (lambda: cluster_weights_soft(np.array([[np.nan, 1.0], [1.0, 0.0]])), "non-finite"),
    ],
)
def test_weight_function_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_minmax_scale():
    np.testing.assert_allclose(minmax_scale([-3.0, -1.0, -2.0]), [1.0, 10.0, 5.5])
    np.testing.assert_allclose(minmax_scale([2.0, 2.0]), [1.0, 1.0])


# ------------------------------------------------------------------------------------------------
# static samplers
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hard", [False, True])
def test_static_equal_cluster_mass(hard):
    gen = rng(3)
    labels = np.repeat([0, 1, 2], [5, 20, 75])
    soft = one_hot(labels) * 0.8 + gen.random((100, 3)) * 0.1
    s = PlumeStaticSampler(100, rng(0), soft, hard=hard, epsilon=0.0)
    p = s.probabilities()
    if hard:
        np.testing.assert_allclose(np.bincount(labels, weights=p), [1 / 3] * 3)
    else:
        np.testing.assert_allclose(cluster_mass_soft(p, soft), [1 / 3] * 3)
    s_eps = PlumeStaticSampler(100, rng(0), soft, hard=hard, epsilon=0.1)
    np.testing.assert_allclose(s_eps.probabilities(), 0.9 * p + 0.1 / 100)
    np.testing.assert_allclose(s.cluster_weights(), [1 / 3] * 3)
    assert s.clusters.tolist() == labels.tolist()


def test_static_hand_example_two_clusters():
    s = PlumeStaticSampler(4, rng(0), np.array([0, 0, 0, 1]), epsilon=0.2)
    np.testing.assert_allclose(s.probabilities(), 0.8 * np.array([1 / 6, 1 / 6, 1 / 6, 1 / 2]) + 0.05)
    draws = s.sample_many(200_000)
    freq = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(freq, s.probabilities(), atol=0.005)


@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_epsilon_mixing_frequency(eps):
    """Prioritised set = cluster 0 (20 of 100 traces); only ε draws can leave it."""
    labels = np.repeat([0, 1], [20, 80])
    s = PlumeStaticSampler(100, rng(7), labels, pools=[1.0, 0.0], epsilon=eps)
    draws = s.sample_many(100_000)
    outside = np.mean(labels[draws] == 1)
    assert abs(outside - eps * 0.8) < 0.005
    assert abs(s.uniform_draws / 100_000 - eps) < 0.005
    scalar = np.array([s.sample() for _ in range(20_000)])
    assert abs(np.mean(labels[scalar] == 1) - eps * 0.8) < 0.012


def test_scalar_and_vector_draws_identical():
    labels = np.repeat([0, 1, 2], [3, 10, 30])
    a = PlumeStaticSampler(43, rng(11), labels, epsilon=0.25)
    b = PlumeStaticSampler(43, rng(11), labels, epsilon=0.25)
    assert [a.sample() for _ in range(500)] == b.sample_many(500).tolist()
    np.testing.assert_array_equal(a.draws, b.draws)


def test_cluster_uniform():
    s = ClusterUniformSampler(4, rng(0), np.array([0, 0, 0, 1]))
    np.testing.assert_allclose(s.probabilities(), [1 / 6, 1 / 6, 1 / 6, 1 / 2])
    assert s.epsilon == 0.0
    draws = s.sample_many(60_000)
    assert abs(np.mean(draws == 3) - 0.5) < 0.01
    soft = np.array([[0.6, 0.4], [0.9, 0.1], [0.2, 0.8]])
    np.testing.assert_allclose(ClusterUniformSampler(3, rng(0), soft).probabilities(), [0.25, 0.25, 0.5])


def test_two_class():
    tput = np.array([5.0, 1.0, 2.0, 9.0, 8.0, 7.0, 6.0, 0.5])  # median 5.5 -> 4 low, 4 high
    s = TwoClassSampler(8, rng(0), tput, epsilon=0.0)
    assert s.threshold == 5.5
    assert s.clusters.tolist() == [0, 0, 0, 1, 1, 1, 1, 0]
    np.testing.assert_allclose(s.probabilities(), 1 / 8)
    s = TwoClassSampler(8, rng(0), tput, threshold=1.5, epsilon=0.1)  # 2 low, 6 high
    p = s.probabilities()
    np.testing.assert_allclose(p[[1, 7]], 0.9 * 0.25 + 0.1 / 8)
    np.testing.assert_allclose(np.bincount(s.clusters, weights=p), [0.45 + 0.025, 0.45 + 0.075])
    with pytest.raises(ValueError, match="leaves a group empty"):
        TwoClassSampler(8, rng(0), tput, threshold=100.0)
    with pytest.raises(ValueError, match="leaves a group empty"):
        TwoClassSampler(3, rng(0), np.array([1.0, 2.0, 2.0]))  # median 2: nothing above


# ------------------------------------------------------------------------------------------------
# Plume-Dynamic
# ------------------------------------------------------------------------------------------------
def planted_low(label, gen):
    return np.full(12, 1.0 if label == 0 else 0.0)  # cluster 1 returns are low


def test_dynamic_uniform_until_warmup_then_schedule():
    s, labels = small_dynamic(epsilon=0.0, warmup=40, recompute_every=20)
    gen = rng(1)
    for _ in range(40):  # exactly 40 prioritised draws: no recompute yet
        i = s.sample()
        s.update(i, planted_low(labels[i], gen))
    assert s.history == []
    np.testing.assert_allclose(s.probabilities(), 1 / 40)
    np.testing.assert_allclose(s.cluster_weights(), [0.5, 0.5])
    s.sample()  # the 41st prioritised draw triggers the first recompute
    assert len(s.history) == 1 and s.history[0][0] == 40
    for _ in range(19):
        s.sample()
    assert len(s.history) == 1
    s.sample()
    assert len(s.history) == 2 and s.history[1][0] == 60


def test_dynamic_moves_mass_to_low_return_cluster():
    s, labels = small_dynamic(alpha=0.0, epsilon=0.1)
    run_episodes(s, labels, planted_low, 200, rng(2))
    assert len(s.history) >= 3
    np.testing.assert_allclose(s.cluster_weights(), [1 / 11, 10 / 11])  # minmax [1, 10]
    mass = np.bincount(labels, weights=s.probabilities())
    np.testing.assert_allclose(mass, 0.9 * np.array([1 / 11, 10 / 11]) + 0.1 * 0.5)
    np.testing.assert_allclose(s.last_terms["mean_return"], [GAMMA_SUM_10, 0.0])


def test_dynamic_alpha1_prefers_unpredictable_cluster():
    def noisy(label, gen):
        level = 1.0 if label == 0 else 1.0 + 3.0 * gen.normal()
        return np.full(12, level)

    s, labels = small_dynamic(alpha=1.0, learning_rate=1e-2, epochs=5, train_every=40,
                              cluster_history=200, recompute_every=100)
    run_episodes(s, labels, noisy, 1500, rng(3))
    assert s.train_rounds >= 30 and s.train_steps >= 300
    w = s.cluster_weights()
    assert w[1] > 0.8, w
    # the predictor learned the predictable cluster's return
    pred = s.predict_returns()
    assert abs(pred[labels == 0].mean() - GAMMA_SUM_10) < 1.0
    # mean returns are about equal, so alpha=0 would not separate them: the error term does
    t = TraceErrorSampler(40, rng(0), one_hot(labels), np.ones((40, 1)))
    assert t.alpha == 1.0 and "alpha" not in inspect.signature(TraceErrorSampler).parameters


def test_dynamic_skips_short_episodes_and_trains_on_schedule():
    s, _ = small_dynamic(train_every=5, batch_size=2)
    s.update(0, np.ones(9))  # shorter than n_step=10: skipped
    assert s.skipped_episodes == 1 and s.recorded_episodes == 0 and s.episodes[0] == 1
    for i in range(5):
        s.update(i, np.ones(10))
    assert s.train_rounds == 1 and s.train_steps == 2  # 5 // 2 = 2 shuffled mini-batches
    r, _ = small_dynamic(train_every=5, single_step_per_round=True, epochs=3)
    for i in range(5):
        r.update(i, np.ones(30))
    assert r.train_rounds == 1 and r.train_steps == 3  # reference slip: 1 full batch per pass


def test_dynamic_cluster_without_history_gets_max_weight():
    n = 30
    labels = np.arange(n) % 3
    s = PlumeDynamicSampler(n, rng(0), one_hot(labels), np.arange(n, dtype=float)[:, None],
                            alpha=0.0, epsilon=0.0, n_step=5, warmup=0, recompute_every=5,
                            torch_seed=0)
    for i in range(n):
        if labels[i] < 2:
            s.update(i, np.full(5, 1.0 if labels[i] == 0 else 0.0))
    s.sample()
    np.testing.assert_allclose(s.cluster_weights(), np.array([1, 10, 10]) / 21)
    assert s.last_terms["history_len"].tolist() == [10, 10, 0]


def test_dynamic_no_history_stays_uniform():
    s, _ = small_dynamic(warmup=0, epsilon=0.0)
    s.sample_many(100)
    assert s.history == []
    np.testing.assert_allclose(s.probabilities(), 1 / 40)
    s.update(0, np.ones(10))
    s.sample()
    assert len(s.history) == 1


def test_dynamic_hard_mode_cluster_mass():
    s, labels = small_dynamic(alpha=0.0, hard=True, epsilon=0.2)
    run_episodes(s, labels, planted_low, 120, rng(5))
    mass = np.bincount(labels, weights=s.probabilities())
    np.testing.assert_allclose(mass, 0.8 * np.array([1 / 11, 10 / 11]) + 0.1)


def test_dynamic_scalar_and_vector_draws_identical_across_recomputes():
    a, labels = small_dynamic(seed=4, epsilon=0.3, warmup=30, recompute_every=7)
    b, _ = small_dynamic(seed=4, epsilon=0.3, warmup=30, recompute_every=7)
    for i in range(40):
        a.update(i, np.full(10, float(labels[i])))
        b.update(i, np.full(10, float(labels[i])))
    seq_a = [a.sample() for _ in range(300)]
    seq_b = np.concatenate([b.sample_many(c) for c in (1, 50, 0, 99, 150)]).tolist()
    assert seq_a == seq_b
    assert len(a.history) == len(b.history) > 5
    for (da, wa), (db, wb) in zip(a.history, b.history):
        assert da == db
        np.testing.assert_array_equal(wa, wb)


def test_standardise_features():
    x = np.array([[1.0, 5.0, 0.0], [3.0, 5.0, 1.0], [5.0, 5.0, 2.0]])
    before = x.copy()
    z = standardise_features(x)
    np.testing.assert_allclose(z[:, 0], [-1.2247448714, 0.0, 1.2247448714])
    np.testing.assert_array_equal(z[:, 1], 0.0)  # constant column
    np.testing.assert_array_equal(x, before)
    with pytest.raises(ValueError, match="trace 1, feature 2"):
        standardise_features(np.array([[1.0, 2.0, 3.0], [1.0, 2.0, np.nan]]))


# ------------------------------------------------------------------------------------------------
# peers
# ------------------------------------------------------------------------------------------------
def test_plr_replay_distribution_hand_example():
    scores = np.array([0.5, 2.0, 1.0, 0.1])  # ranks 3, 1, 2, 4
    stale = np.array([3.0, 0.0, 1.0, 2.0])
    seen = np.ones(4, dtype=bool)
    p = plr_replay_distribution(scores, stale, seen, temperature=1.0, staleness_coef=0.5)
    p_s = np.array([1 / 3, 1, 1 / 2, 1 / 4]) / (25 / 12)  # = [4, 12, 6, 3] / 25
    p_c = np.array([3, 0, 1, 2]) / 6
    np.testing.assert_allclose(p, 0.5 * p_s + 0.5 * p_c)
    np.testing.assert_allclose(p, [2 / 25 + 1 / 4, 6 / 25, 3 / 25 + 1 / 12, 3 / 50 + 1 / 6])
    # the paper's beta = 0.1: h = rank^-10
    p = plr_replay_distribution(scores, stale, seen, temperature=0.1, staleness_coef=0.1)
    h = np.array([3.0, 1.0, 2.0, 4.0]) ** -10
    np.testing.assert_allclose(p, 0.9 * h / h.sum() + 0.1 * p_c)
    # an unseen trace gets nothing and ranks are among seen traces only
    seen = np.array([True, True, True, False])
    p = plr_replay_distribution(np.array([0.5, 2.0, 1.0, 99.0]), stale, seen,
                                temperature=1.0, staleness_coef=0.0)
    np.testing.assert_allclose(p, [2 / 11, 6 / 11, 3 / 11, 0.0])


def test_plr_sampler_state_matches_formula_and_draws():
    s = PrioritizedLevelReplaySampler(4, rng(0), temperature=1.0, staleness_coef=0.5)
    for i, score in enumerate([0.5, 2.0, 1.0, 0.1]):
        s.update(i, np.zeros(3), value_l1=score)
    assert s.n_seen == 4 and s.proxy_scores == 0
    history = [s.sample() for _ in range(6)]
    clock = len(history)
    last = np.zeros(4)
    for t, i in enumerate(history, start=1):
        last[i] = t
    expected = plr_replay_distribution(np.array([0.5, 2.0, 1.0, 0.1]), clock - last,
                                       np.ones(4, bool), temperature=1.0, staleness_coef=0.5)
    np.testing.assert_allclose(s.probabilities(), expected)
    # empirical next-draw distribution from this exact state
    state = s.state_dict()
    gen = rng(99)
    counts = np.zeros(4)
    for _ in range(20_000):
        s.rng = np.random.default_rng()
        s.load_state_dict(state)
        s.rng = gen
        counts[s.sample()] += 1
    np.testing.assert_allclose(counts / 20_000, expected, atol=0.012)


def test_plr_unseen_first_and_replay_schedule():
    s = PrioritizedLevelReplaySampler(10, rng(1))
    for i in range(5):
        s.update(i, np.zeros(2), advantages=np.array([1.0, -3.0]) * (i + 1))
    assert s.scores[2] == pytest.approx(6.0)  # mean |A|
    draws = s.sample_many(500)
    assert set(draws.tolist()) <= {5, 6, 7, 8, 9}  # rho=1: unseen traces until all seen
    np.testing.assert_allclose(s.probabilities(), [0] * 5 + [0.2] * 5)
    half = PrioritizedLevelReplaySampler(10, rng(1), rho=0.5)
    for i in range(5):
        half.update(i, np.zeros(2), value_l1=float(i))
    assert half.replay_probability() == 0.5
    draws = half.sample_many(4000)
    assert abs(np.mean(draws < 5) - 0.5) < 0.03
    np.testing.assert_allclose(half.probabilities()[5:], 0.1)


def test_plr_proxy_score_without_learner_stats():
    s = PrioritizedLevelReplaySampler(3, rng(0), proxy_ema=0.5)
    with pytest.warns(RuntimeWarning, match="proxy"):
        s.update(0, np.array([1.0, 1.0]))  # very first episode: score 0
    assert s.scores[0] == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        s.update(1, np.array([5.0]))  # first on trace 1: |5 - mean(2)| = 3
        assert s.scores[1] == pytest.approx(3.0)
        s.update(0, np.array([4.0]))  # |4 - 2| = 2; trace 0 mean -> 3
        assert s.scores[0] == pytest.approx(2.0)
        assert s.mean_return[0] == pytest.approx(3.0)
    assert s.proxy_scores == 3
    r = PrioritizedLevelReplaySampler(3, rng(0), score="return_delta")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r.update(0, np.ones(2), value_l1=100.0)  # ignored by design
    assert r.scores[0] == 0.0


def test_worst_case_floor_and_priority():
    n = 20
    s = WorstCaseSampler(n, rng(0), floor=0.1)
    np.testing.assert_allclose(s.probabilities(), 1 / n)
    for i in range(n):
        s.update(i, np.full(5, float(i)))  # trace 0 has the lowest return
    p = s.probabilities()
    assert p.argmax() == 0 and p.min() >= 0.1 / n - 1e-15
    assert np.all(np.diff(p) < 0)
    draws = s.sample_many(20_000)
    np.testing.assert_allclose(np.bincount(draws, minlength=n) / 20_000, p, atol=0.01)
    q = WorstCaseSampler(n, rng(0), floor=0.2, quantile=0.1)
    for i in range(n):
        q.update(i, np.full(5, float(i)))
    p = q.probabilities()
    np.testing.assert_allclose(p[:2], 0.8 / 2 + 0.2 / n)
    np.testing.assert_allclose(p[2:], 0.2 / n)
    # unseen traces count as the worst seen so far
    u = WorstCaseSampler(4, rng(0), floor=0.0)
    u.update(0, np.ones(3))
    u.update(1, np.zeros(3))
    p = u.probabilities()
    assert p[1] == pytest.approx(p[2]) == pytest.approx(p[3]) and p[0] < p[1]


# ------------------------------------------------------------------------------------------------
# state round trips: identical subsequent draws
# ------------------------------------------------------------------------------------------------
def _reward_for(i, t):
    return np.full(12, np.sin(i + 0.1 * t))


FACTORIES = {
    "plume_static": lambda seed: PlumeStaticSampler(30, rng(seed), np.arange(30) % 3),
    "cluster_uniform": lambda seed: ClusterUniformSampler(30, rng(seed), np.arange(30) % 3),
    "two_class": lambda seed: TwoClassSampler(30, rng(seed), np.arange(30.0)),
    "plume_dynamic": lambda seed: small_dynamic(n=30, k=3, seed=seed, warmup=20,
                                                recompute_every=15, train_every=10)[0],
    "plr": lambda seed: PrioritizedLevelReplaySampler(30, rng(seed), rho=0.3),
    "worst_case": lambda seed: WorstCaseSampler(30, rng(seed)),
    "uniform": lambda seed: UniformSampler(30, rng(seed)),
}


def _drive(sampler, steps, t0):
    out = []
    for t in range(t0, t0 + steps):
        batch = sampler.sample_many(3) if t % 2 else np.array([sampler.sample()])
        out.extend(batch.tolist())
        for i in batch:
            sampler.update(int(i), _reward_for(int(i), t))
    return out


@pytest.mark.filterwarnings("ignore:PLR score")
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_state_dict_round_trip(name):
    a = FACTORIES[name](0)
    _drive(a, 60, 0)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)  # as the harness checkpoints it
    buffer.seek(0)
    b = FACTORIES[name](123)
    b.load_state_dict(torch.load(buffer, weights_only=False))
    assert _drive(a, 60, 60) == _drive(b, 60, 60)
    np.testing.assert_array_equal(a.draws, b.draws)
    np.testing.assert_allclose(a.probabilities(), b.probabilities())
    if name == "plume_dynamic":
        assert len(a.history) == len(b.history) > 3
        np.testing.assert_array_equal(a.predict_returns(), b.predict_returns())


def test_load_state_of_other_sampler_rejected():
    a = PlumeStaticSampler(5, rng(0), np.arange(5) % 2)
    with pytest.raises(ValueError, match="given to"):
        TwoClassSampler(5, rng(0), np.arange(5.0)).load_state_dict(a.state_dict())


# ------------------------------------------------------------------------------------------------
# bad input and registry
# ------------------------------------------------------------------------------------------------
def _feats(n):
    return np.arange(n, dtype=float)[:, None]


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: PlumeDynamicSampler(4, rng(0), np.arange(4) % 2, _feats(4), alpha=1.5), "alpha"),
        (lambda: PlumeDynamicSampler(4, rng(0), np.arange(4) % 2, _feats(4), alpha=-0.1), "alpha"),
        (lambda: PlumeDynamicSampler(4, rng(0), np.arange(4) % 2, _feats(4), epsilon=2), "epsilon"),
        (lambda: PlumeDynamicSampler(4, rng(0), np.arange(4) % 2, _feats(4), n_step=0), "n_step"),
        (lambda: PlumeDynamicSampler(4, rng(0), np.arange(5) % 2, _feats(4)), "5 rows"),
        (lambda: PlumeDynamicSampler(4, rng(0), np.arange(4) % 2, _feats(3)), "3 rows"),
        (lambda: PlumeDynamicSampler(4, rng(0), np.arange(4) % 2,
                                     np.array([[1.0], [np.nan], [2.0], [3.0]])), "trace 1, feature 0"),
        (lambda: PlumeStaticSampler(4, rng(0), np.array([0, 0, 2, 2])), "no traces"),
        (lambda: PlumeStaticSampler(4, rng(0), np.array([[1.0, 0], [1, 0], [1, 0], [1, 0]])),
         "zero membership mass"),
        (lambda: PlumeStaticSampler(2, rng(0), np.eye(3)[:2]), "fewer traces"),
        (lambda: PlumeStaticSampler(4, rng(0), np.full((4, 2), 0.5), hard=True), "no traces"),
        (lambda: ClusterUniformSampler(3, rng(0), np.array([0, 1])), "2 rows"),
        (lambda: PrioritizedLevelReplaySampler(3, rng(0), score="nope"), "score"),
        (lambda: WorstCaseSampler(3, rng(0), floor=1.2), "floor"),
    ],
)
def test_bad_input(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_constant_feature_columns_handled():
    n = 12
    labels = np.arange(n) % 2
    feats = np.column_stack([np.full(n, 3.0), labels.astype(float), np.zeros(n)])
    s = PlumeDynamicSampler(n, rng(0), one_hot(labels), feats, n_step=3, train_every=4,
                            warmup=5, recompute_every=5, batch_size=2)
    np.testing.assert_array_equal(s.features[:, [0, 2]], 0.0)
    for t in range(40):
        i = s.sample()
        s.update(i, np.full(4, float(labels[i])))
    assert np.all(np.isfinite(s.predict_returns())) and len(s.history) > 0
    with pytest.raises(IndexError):
        s.update(n, np.ones(4))


def test_registry():
    assert set(SAMPLERS) == {"uniform", "plume_static", "plume_dynamic", "trace_error",
                             "cluster_uniform", "two_class", "plr", "worst_case", "genet",
                             "cl2", "tscl"}
    for name, cls in SAMPLERS.items():
        assert cls.name == name
        params = list(inspect.signature(cls.__init__).parameters)
        assert params[:3] == ["self", "n_traces", "rng"]


def test_dynamic_trains_its_predictor_inside_an_agents_no_grad_rollout():
    # The environment reports episodes from within the agent's torch.no_grad() rollout.
    s, labels = small_dynamic()
    with torch.no_grad():
        run_episodes(s, labels, planted_low, 60, rng(4))
    assert s.train_rounds >= 2 and np.isfinite(s.last_train_loss)
