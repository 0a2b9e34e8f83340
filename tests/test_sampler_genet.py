"""GenetSampler: gap-to-baseline cluster choice, 0.7/0.3 re-weighting, evaluation protocol."""

from __future__ import annotations

import copy
import inspect
import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from plume.sampling.genet import GenetSampler

CONF = Path(__file__).resolve().parents[1] / "conf" / "sampler" / "genet.yaml"

# 3 clusters of sizes 2, 3, 5 (n = 10)
LABELS = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 2])
BASELINE = np.array([5.0, 5.0, 3.0, 3.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0])
ALL = np.arange(10)


def make(seed=0, labels=LABELS, baseline=BASELINE, **kw):
    params = {"budget_steps": 1000, "epsilon": 0.1}
    params.update(kw)
    return GenetSampler(len(labels), np.random.default_rng(seed), labels, baseline, **params)


def policy_with_gaps(gaps, labels=LABELS, baseline=BASELINE):
    """Policy scores on every trace giving cluster c the mean gap ``gaps[c]``; the per-trace
    gaps vary inside a cluster (+-1) so that only the mean matters."""
    scores = baseline - np.asarray(gaps, dtype=float)[labels]
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        scores[members[0]] += 1.0
        scores[members[1]] -= 1.0
    return scores


def per_cluster(values):
    """Per-trace array from one value per cluster of LABELS."""
    return np.asarray(values, dtype=float)[LABELS]


# ------------------------------------------------------------------------------------------------
# cluster choice
# ------------------------------------------------------------------------------------------------
def test_largest_positive_gap_is_chosen_and_negative_ignored():
    s = make()
    assert s.observe_policy(ALL, policy_with_gaps([-5.0, 1.0, 0.5])) == 1
    np.testing.assert_allclose(s.gap_history[0], [-5.0, 1.0, 0.5])
    assert s.chosen_history == [1] and s.rounds_done == 1
    t = make()
    assert t.observe_policy(ALL, policy_with_gaps([-5.0, 0.25, 0.5])) == 2


def test_no_positive_gap_changes_nothing():
    s = make()
    before = s.probabilities()
    assert s.observe_policy(ALL, policy_with_gaps([0.0, -1.0, -0.5])) is None
    np.testing.assert_array_equal(s.probabilities(), before)
    np.testing.assert_allclose(s.cluster_weights(), [0.2, 0.3, 0.5])
    assert s.components == [(-1, 1.0)]
    assert s.rounds_done == 1 and s.chosen_history == [None]
    np.testing.assert_allclose(s.gap_history[0], [0.0, -1.0, -0.5])


@pytest.mark.parametrize("gaps, chosen", [([1.0, 1.0, 0.5], 0), ([-1.0, 2.0, 2.0], 1),
                                          ([0.5, 0.5, 0.5], 0)])
def test_ties_go_to_the_lowest_cluster(gaps, chosen):
    assert make().observe_policy(ALL, policy_with_gaps(gaps)) == chosen


def test_unevaluated_clusters_are_nan_and_never_chosen():
    s = make()
    traces = np.array([2, 4, 9])  # clusters 1, 1, 2; cluster 0 not evaluated
    scores = np.array([2.0, 3.0, 1.5])  # gap cluster 1: 3 - 2.5 = 0.5; cluster 2: 1 - 1.5 < 0
    assert s.observe_policy(traces, scores) == 1
    np.testing.assert_allclose(s.gap_history[0], [np.nan, 0.5, -0.5])
    assert make().observe_policy(np.array([9]), np.array([3.0])) is None


# ------------------------------------------------------------------------------------------------
# re-weighting against hand calculations (sizes 2, 3, 5; ε = 0.1: probs = 0.9 p + 0.01)
# ------------------------------------------------------------------------------------------------
def test_initial_distribution_is_uniform():
    s = make()
    np.testing.assert_allclose(s.probabilities(), 0.1)
    np.testing.assert_allclose(s.cluster_weights(), [0.2, 0.3, 0.5])


def test_reweighting_after_one_round():
    s = make()
    s.observe_policy(ALL, policy_with_gaps([0.0, 1.0, 0.0]))
    # p: 0.7 / 10 everywhere + 0.3 / 3 on cluster 1
    np.testing.assert_allclose(s.prioritised_probabilities(), per_cluster([0.07, 0.17, 0.07]))
    np.testing.assert_allclose(s.probabilities(), per_cluster([0.073, 0.163, 0.073]))
    np.testing.assert_allclose(s.cluster_weights(), [0.14, 0.51, 0.35])
    assert s.components == [(-1, pytest.approx(0.7)), (1, pytest.approx(0.3))]


def test_reweighting_same_cluster_twice():
    s = make()
    s.observe_policy(ALL, policy_with_gaps([0.0, 1.0, 0.0]))
    s.observe_policy(ALL, policy_with_gaps([0.0, 2.0, 0.0]))
    # components: uniform 0.49, cluster 1 0.21, cluster 1 0.3
    assert [c for c, _ in s.components] == [-1, 1, 1]
    np.testing.assert_allclose([w for _, w in s.components], [0.49, 0.21, 0.3])
    np.testing.assert_allclose(s.probabilities(), per_cluster([0.0541, 0.2071, 0.0541]))
    np.testing.assert_allclose(s.cluster_weights(), [0.098, 0.657, 0.245])


def test_reweighting_two_different_clusters():
    s = make()
    s.observe_policy(ALL, policy_with_gaps([0.0, 1.0, 0.0]))
    s.observe_policy(ALL, policy_with_gaps([0.0, 0.0, 1.0]))
    # p: 0.049 everywhere + 0.21 / 3 on cluster 1 + 0.3 / 5 on cluster 2
    np.testing.assert_allclose(s.prioritised_probabilities(), per_cluster([0.049, 0.119, 0.109]))
    np.testing.assert_allclose(s.probabilities(), per_cluster([0.0541, 0.1171, 0.1081]))
    np.testing.assert_allclose(s.cluster_weights(), [0.098, 0.357, 0.545])
    assert s.chosen_history == [1, 2] and s.rounds_done == 2


def test_update_only_counts():
    s = make()
    s.update(3, np.ones(5))
    assert s.episodes.tolist() == [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    np.testing.assert_allclose(s.probabilities(), 0.1)


# ------------------------------------------------------------------------------------------------
# evaluation protocol
# ------------------------------------------------------------------------------------------------
def test_evaluation_traces_per_cluster_sorted_and_in_range():
    s = make(traces_per_cluster=4)
    seen_big = set()
    for _ in range(50):
        t = s.evaluation_traces()
        assert t.dtype == np.int64 and t.size == 2 + 3 + 4
        assert np.all(np.diff(t) > 0) and t.min() >= 0 and t.max() < 10
        assert set(t[:5].tolist()) == {0, 1, 2, 3, 4}  # clusters of size <= 4: all of them
        assert np.all(LABELS[t[5:]] == 2)
        seen_big.update(t[5:].tolist())
    assert seen_big == {5, 6, 7, 8, 9}  # the draw is random, not always the same four
    one = make(traces_per_cluster=1).evaluation_traces()
    assert sorted(LABELS[one].tolist()) == [0, 1, 2]


@pytest.mark.parametrize("budget, rounds, every", [(1000, 9, 100), (1001, 4, 200), (5, 9, 1),
                                                   (1, 1, 1), (2048, 1, 1024)])
def test_evaluation_every(budget, rounds, every):
    assert make(budget_steps=budget, rounds=rounds).evaluation_every == every


def test_soft_memberships_and_metadata():
    soft = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.3, 0.7]])
    s = GenetSampler(4, np.random.default_rng(0), soft, np.zeros(4), budget_steps=10,
                     baseline="bba")
    assert s.clusters.tolist() == [0, 0, 1, 1] and s.n_clusters == 2
    assert s.baseline == "bba" and s.name == "genet"
    assert GenetSampler.inputs == ("memberships", "baseline_scores")
    # a GMM cluster that wins no argmax is kept, empty, and never chosen
    e = GenetSampler(3, np.random.default_rng(0), np.array([[0.6, 0.4, 0], [0.6, 0.3, 0.1],
                     [0.2, 0.3, 0.5]]), np.ones(3), budget_steps=10)
    assert e.n_clusters == 3 and e.cluster_weights().tolist()[1] == 0.0
    assert e.evaluation_traces().tolist() == [0, 1, 2]
    assert e.observe_policy(np.arange(3), np.array([0.0, 0.0, 2.0])) == 0


# ------------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw, match",
    [
        ({"new_weight": 0.0}, "new_weight"),
        ({"new_weight": 1.0}, "new_weight"),
        ({"new_weight": float("nan")}, "new_weight"),
        ({"epsilon": 1.5}, "epsilon"),
        ({"budget_steps": 0}, "budget_steps"),
        ({"rounds": 0}, "rounds"),
        ({"traces_per_cluster": 0}, "traces_per_cluster"),
        ({"traces_per_cluster": 2.5}, "traces_per_cluster"),
        ({"baseline": 3}, "baseline"),
        ({"scores": BASELINE[:9]}, "baseline_scores has 9 values, expected 10"),
        ({"scores": np.where(ALL == 7, np.inf, 1.0)}, "at trace 7"),
        ({"scores": np.where(ALL == 3, np.nan, 1.0)}, "at trace 3"),
        ({"labels": LABELS[:9]}, "9 labels"),
        ({"labels": np.array([0, 0, 2, 2, 2, 2, 2, 2, 2, 2])}, "no traces"),
    ],
)
def test_bad_parameters(kw, match):
    params = {"budget_steps": 1000, **kw}
    labels = params.pop("labels", LABELS)
    scores = params.pop("scores", BASELINE)
    with pytest.raises(ValueError, match=match):
        GenetSampler(10, np.random.default_rng(0), labels, scores, **params)


def test_budget_steps_is_required():
    with pytest.raises(TypeError, match="budget_steps"):
        GenetSampler(10, np.random.default_rng(0), LABELS, BASELINE)


@pytest.mark.parametrize(
    "traces, scores, match",
    [
        (np.array([0, 1]), np.array([1.0]), "scores has 1 values, expected 2"),
        (np.array([0, 10]), np.array([1.0, 1.0]), "trace indices"),
        (np.array([-1, 2]), np.array([1.0, 1.0]), "trace indices"),
        (np.array([], dtype=np.int64), np.array([]), "non-empty"),
        (np.array([0.0, 1.0]), np.array([1.0, 1.0]), "integer"),
        (np.array([2, 6]), np.array([1.0, np.nan]), "at trace 6"),
    ],
)
def test_bad_policy_scores(traces, scores, match):
    s = make()
    with pytest.raises(ValueError, match=match):
        s.observe_policy(traces, scores)
    assert s.rounds_done == 0 and s.gap_history == []


# ------------------------------------------------------------------------------------------------
# draws, persistence, copies
# ------------------------------------------------------------------------------------------------
def two_rounds(s):
    s.observe_policy(ALL, policy_with_gaps([0.0, 1.0, 0.0]))
    s.observe_policy(s.evaluation_traces(), np.zeros(9) - 10.0 * np.arange(9))
    return s


def test_draws_follow_probabilities():
    s = make(seed=3)
    s.observe_policy(ALL, policy_with_gaps([0.0, 1.0, 0.0]))
    s.observe_policy(ALL, policy_with_gaps([0.0, 0.0, 1.0]))
    n = 200_000
    freq = np.bincount(s.sample_many(n), minlength=10) / n
    # binomial sd <= 0.0008; ignoring ε or a round moves some trace by >= 0.005
    np.testing.assert_allclose(freq, s.probabilities(), atol=0.003)
    expected = n * s.probabilities()
    chi2 = ((freq * n - expected) ** 2 / expected).sum()
    assert chi2 < 27.88  # df 9, p = 0.001
    a, b = make(seed=5), make(seed=5)
    assert [a.sample() for _ in range(300)] == b.sample_many(300).tolist()


def _next(s):
    draws = [s.sample() for _ in range(40)] + s.sample_many(60).tolist()
    return draws, s.evaluation_traces().tolist(), s.probabilities()


def test_state_dict_round_trip():
    a = two_rounds(make(seed=0))
    a.sample_many(37)
    a.sample()
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)  # as the harness checkpoints it
    buffer.seek(0)
    b = make(seed=123)
    b.load_state_dict(torch.load(buffer, weights_only=False))
    (da, ea, pa), (db, eb, pb) = _next(a), _next(b)
    assert da == db and ea == eb
    np.testing.assert_array_equal(pa, pb)
    np.testing.assert_array_equal(a.draws, b.draws)
    assert a.rounds_done == b.rounds_done == 2 and a.chosen_history == b.chosen_history
    np.testing.assert_array_equal(np.array(a.gap_history), np.array(b.gap_history))
    assert a.components == b.components
    scores = policy_with_gaps([3.0, 0.0, 0.0])
    assert a.observe_policy(ALL, scores) == b.observe_policy(ALL, scores) == 0
    np.testing.assert_array_equal(a.probabilities(), b.probabilities())


def test_load_state_rejects_other_sampler_or_clusters():
    a = make()
    with pytest.raises(ValueError, match="state is for 3 clusters, this sampler has 2"):
        make(labels=np.arange(10) % 2).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="given to"):
        a.load_state_dict({**a.state_dict(), "name": "uniform"})


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda s: pickle.loads(pickle.dumps(s))])
def test_copies_continue_identically(clone):
    a = two_rounds(make(seed=9))
    a.sample_many(11)
    b = clone(a)
    (da, ea, pa), (db, eb, pb) = _next(a), _next(b)
    assert da == db and ea == eb
    np.testing.assert_array_equal(pa, pb)
    assert b.chosen_history == a.chosen_history


def test_config_matches_constructor():
    conf = OmegaConf.load(CONF)
    assert conf.name == "genet" and conf.baseline is None
    assert OmegaConf.to_container(conf)["budget_steps"] == "${train.total_steps}"
    params = inspect.signature(GenetSampler.__init__).parameters
    keys = set(conf) - {"name"}
    assert keys == {p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY}
    defaults = {k: conf[k] for k in keys - {"budget_steps"}}
    assert defaults == {k: params[k].default for k in defaults}
