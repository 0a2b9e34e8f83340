"""Replay: sum-tree numbers by hand, PER sampling frequencies and weights, circular overwrite,
state round trips, n-step returns by hand (episode ends inside the window)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plume.agents.replay import (
    NStepWindows,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SumTree,
    Transitions,
)


def transitions(rewards, obs_dim=2) -> Transitions:
    """Transitions tagged by their reward (obs = reward, next_obs = reward + 0.5)."""
    r = np.asarray(rewards, dtype=np.float32)
    return Transitions(
        obs=np.repeat(r[:, None], obs_dim, axis=1),
        actions=np.arange(len(r), dtype=np.int64) % 3,
        rewards=r,
        next_obs=np.repeat(r[:, None] + 0.5, obs_dim, axis=1),
        discounts=np.full(len(r), 0.9, dtype=np.float32),
    )


# ---------------------------------------------------------------------------------------------
# Sum tree
# ---------------------------------------------------------------------------------------------
def test_sum_tree_totals_and_prefix_sum_retrieval_by_hand():
    tree = SumTree(4)
    tree.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(tree.tree[1:], [10, 3, 7, 1, 2, 3, 4])
    assert tree.total == 10.0
    np.testing.assert_array_equal(tree.find(np.array([0.5, 1.5, 3.5, 9.9])), [0, 1, 2, 3])
    # Boundaries: leaf j covers [sum(p[:j]), sum(p[:j+1])).
    np.testing.assert_array_equal(
        tree.find(np.array([0.0, 0.999, 1.0, 2.999, 3.0, 5.999, 6.0, 10.0])),
        [0, 0, 1, 1, 2, 2, 3, 3],
    )


def test_sum_tree_updates_change_totals_exactly_and_last_duplicate_wins():
    tree = SumTree(4)
    tree.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    tree.update(np.array([2]), np.array([0.5]))
    np.testing.assert_array_equal(tree.tree[1:], [7.5, 3, 4.5, 1, 2, 0.5, 4])
    tree.update(np.array([1, 3, 1]), np.array([5.0, 0.25, 7.0]))
    np.testing.assert_array_equal(tree.leaves(), [1, 7, 0.5, 0.25])
    assert tree.total == 8.75
    with pytest.raises(IndexError):
        tree.update(np.array([4]), np.array([1.0]))
    with pytest.raises(ValueError):
        tree.update(np.array([0]), np.array([-1.0]))


def test_sum_tree_padding_and_empty_leaves_are_never_found():
    tree = SumTree(5)  # 8 leaves, 3 of them padding
    assert tree.n_leaves == 8 and tree.depth == 3
    tree.update(np.array([0, 3]), np.array([1.0, 2.0]))  # leaves 1, 2, 4 stay empty
    found = tree.find(np.array([0.0, 0.5, 1.0, 2.9999999, 3.0, 1e9]))
    np.testing.assert_array_equal(found, [0, 0, 3, 3, 3, 3])
    one = SumTree(1)
    one.update(np.array([0]), np.array([2.0]))
    assert one.total == 2.0 and one.find(np.array([0.0, 1.9]))[0] == 0


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 13),
    alpha=st.sampled_from([0.0, 0.5, 1.0]),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(1, 20)),
            st.tuples(st.just("update"), st.lists(st.floats(-5, 5), min_size=1, max_size=8)),
        ),
        max_size=12,
    ),
)
def test_prioritized_buffer_matches_a_reference_model(capacity, alpha, ops):
    """After any sequence of adds (with circular overwrite) and priority updates: every
    internal node is the sum of its children, the root the sum of the leaves, the leaves the
    priorities of a naive reference model, and padding/unused leaves 0."""
    buf = PrioritizedReplayBuffer(capacity, 2, alpha=alpha, eps=0.01, seed=0)
    model = np.zeros(capacity)  # raw priorities of a slot-by-slot reference
    max_priority, pos, size, counter = 1.0, 0, 0, 0
    rng = np.random.default_rng(capacity)
    for kind, arg in ops:
        if kind == "add":
            buf.add(transitions(np.arange(counter, counter + arg)))
            for _ in range(arg):
                model[pos] = max_priority
                pos, size = (pos + 1) % capacity, min(size + 1, capacity)
            counter += arg
        elif size > 0:
            idx = rng.integers(0, size, size=len(arg))
            buf.update_priorities(idx, np.asarray(arg))
            for i, td in zip(idx, arg):
                model[i] = abs(td) + 0.01
                max_priority = max(max_priority, abs(td) + 0.01)
    tree = buf.tree.tree
    internal = np.arange(1, buf.tree.n_leaves)
    np.testing.assert_array_equal(tree[internal], tree[2 * internal] + tree[2 * internal + 1])
    np.testing.assert_allclose(buf.tree.total, tree[buf.tree.n_leaves :].sum(), rtol=1e-12)
    expected = np.where(np.arange(capacity) < size, model**alpha, 0.0)
    np.testing.assert_allclose(buf.tree.leaves(), expected, rtol=1e-12)
    assert np.all(tree[buf.tree.n_leaves + capacity :] == 0)
    assert (buf.pos, buf.size, buf.max_priority) == (pos, size, pytest.approx(max_priority))
    if size:  # the stored transitions are the last `size` added, oldest overwritten
        assert sorted(buf.rewards[:size].tolist()) == list(range(counter - size, counter))


# ---------------------------------------------------------------------------------------------
# Buffers
# ---------------------------------------------------------------------------------------------
def test_circular_overwrite_positions_and_contents():
    buf = ReplayBuffer(3, 2, seed=0)
    np.testing.assert_array_equal(buf.add(transitions([0, 1])), [0, 1])
    np.testing.assert_array_equal(buf.add(transitions([2, 3, 4])), [2, 0, 1])
    assert (buf.pos, buf.size, len(buf)) == (2, 3, 3)
    np.testing.assert_array_equal(buf.rewards, [3, 4, 2])
    np.testing.assert_array_equal(buf.next_obs[:, 0], [3.5, 4.5, 2.5])
    buf.add(transitions(np.arange(10, 17)))  # longer than the capacity: the last 3 are kept
    assert (buf.pos, buf.size) == (0, 3)
    np.testing.assert_array_equal(buf.rewards, [14, 15, 16])


def test_uniform_sampling_frequencies_and_fields():
    buf = ReplayBuffer(8, 2, seed=1)
    buf.add(transitions(np.arange(5)))
    batch = buf.sample(100_000)
    counts = np.bincount(batch.indices, minlength=8)
    assert counts[5:].sum() == 0  # only stored slots
    np.testing.assert_allclose(counts[:5] / 100_000, 0.2, atol=0.005)
    np.testing.assert_array_equal(batch.rewards, batch.indices)
    np.testing.assert_array_equal(batch.next_obs[:, 1], batch.indices + 0.5)
    np.testing.assert_array_equal(batch.weights, 1.0)
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(4, 2).sample(1)


def test_prioritized_sampling_frequencies_match_p_alpha():
    buf = PrioritizedReplayBuffer(6, 2, alpha=0.5, eps=0.0, seed=3)
    buf.add(transitions(np.arange(4)))
    buf.update_priorities(np.arange(4), np.array([1.0, -4.0, 9.0, 0.25]))  # |td|, eps 0
    expected = np.sqrt([1.0, 4.0, 9.0, 0.25])
    expected /= expected.sum()  # [1, 2, 3, 0.5] / 6.5
    np.testing.assert_allclose(buf.probabilities(np.arange(4)), expected)
    counts = np.zeros(6)
    for _ in range(2000):
        counts += np.bincount(buf.sample(64, beta=0.4).indices, minlength=6)
    np.testing.assert_allclose(counts / counts.sum(), np.r_[expected, 0, 0], atol=0.005)


def test_prioritized_new_transitions_get_the_max_priority_seen():
    buf = PrioritizedReplayBuffer(4, 2, alpha=1.0, eps=0.5, seed=0)
    buf.add(transitions([0, 1]))
    np.testing.assert_array_equal(buf.tree.leaves(), [1, 1, 0, 0])  # initial max priority 1
    buf.update_priorities(np.array([0, 1]), np.array([2.5, 0.0]))
    np.testing.assert_array_equal(buf.tree.leaves(), [3.0, 0.5, 0, 0])
    buf.add(transitions([2]))
    np.testing.assert_array_equal(buf.tree.leaves(), [3.0, 0.5, 3.0, 0])
    assert buf.tree.total == 6.5


def test_importance_weights_by_hand():
    """alpha 1, priorities [1, 2, 3, 4]: P = [.1, .2, .3, .4]; N = 4, beta 0.5:
    w = (4 P)^-0.5 = [1.58114, 1.11803, 0.91287, 0.79057], divided by the batch max."""
    buf = PrioritizedReplayBuffer(4, 2, alpha=1.0, eps=0.0, seed=0)
    buf.add(transitions(np.arange(4)))
    buf.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    raw = np.array([1.5811388, 1.1180340, 0.9128709, 0.7905694])
    seen = set()
    for _ in range(50):
        batch = buf.sample(4, beta=0.5)
        # Stratified: one draw in each quarter [0, 2.5), [2.5, 5), [5, 7.5), [7.5, 10).
        assert np.all(np.diff(batch.indices) >= 0) and batch.indices[3] == 3
        assert batch.indices[0] in (0, 1) and batch.indices[2] in (2, 3)
        np.testing.assert_allclose(
            batch.weights, raw[batch.indices] / raw[batch.indices].max(), rtol=1e-6
        )
        seen.update(batch.indices.tolist())
    assert seen == {0, 1, 2, 3}
    # beta 0: no correction.
    np.testing.assert_array_equal(buf.sample(4, beta=0.0).weights, 1.0)


@pytest.mark.parametrize("prioritized", [False, True])
def test_buffer_state_dict_round_trip(prioritized):
    def make(seed):
        if prioritized:
            return PrioritizedReplayBuffer(5, 2, alpha=0.6, eps=1e-3, seed=seed)
        return ReplayBuffer(5, 2, seed=seed)

    buf = make(0)
    buf.add(transitions(np.arange(7)))
    if prioritized:
        buf.update_priorities(np.array([1, 3]), np.array([0.5, 3.0]))
    buf.sample(3)
    state = buf.state_dict()
    restored = make(99)
    restored.load_state_dict(state)
    buf.add(transitions([100]))  # the state is a copy, not a view of live arrays
    assert 100 not in state["rewards"]
    restored.add(transitions([100]))
    for name in ReplayBuffer.FIELDS:
        np.testing.assert_array_equal(getattr(restored, name), getattr(buf, name))
    assert (restored.pos, restored.size) == (buf.pos, buf.size)
    a, b = buf.sample(16), restored.sample(16)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.weights, b.weights)
    if prioritized:
        np.testing.assert_array_equal(restored.tree.tree, buf.tree.tree)
        assert restored.max_priority == buf.max_priority == 3.001
    with pytest.raises(ValueError, match="replay obs"):
        ReplayBuffer(5, 3).load_state_dict(state)


# ---------------------------------------------------------------------------------------------
# n-step windows
# ---------------------------------------------------------------------------------------------
def test_n_step_returns_by_hand():
    """n = 3, gamma 0.5, rewards 1, 2, 4, 8, 16 at steps 0-4, obs = 100 * copy + step.

    Copy 0 terminates at step 4, copy 1 is truncated at step 4, copy 2 is truncated at step 1
    and its next step (2) is a NEXT_STEP-style reset step (valid False), so its new episode
    starts at step 3.
    """
    windows = NStepWindows(num_envs=3, n_step=3, gamma=0.5, obs_dim=1)
    rewards = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    emitted = []
    for t in range(5):
        obs = (100.0 * np.arange(3) + t)[:, None]
        next_obs = obs + 0.5  # "the observation after step t" (final obs where done)
        terminated = np.array([t == 4, False, False])
        done = np.array([t == 4, t == 4, t == 1])
        valid = np.array([True, True, t != 2])
        out = windows.push(obs, np.full(3, t), np.full(3, rewards[t]), next_obs, terminated,
                           done, valid)
        emitted.append({int(o): (r, d, int(a), float(n))
                        for o, r, d, a, n in zip(out.obs[:, 0], out.rewards, out.discounts,
                                                 out.actions, out.next_obs[:, 0])})
    g = 0.5
    assert emitted[0] == {}
    assert emitted[1] == {200: (1 + g * 2, g**2, 0, 201.5), 201: (2, g, 1, 201.5)}
    assert emitted[2] == {0: (1 + g * 2 + g**2 * 4, g**3, 0, 2.5),
                          100: (1 + g * 2 + g**2 * 4, g**3, 0, 102.5)}
    assert emitted[3] == {1: (2 + g * 4 + g**2 * 8, g**3, 1, 3.5),
                          101: (2 + g * 4 + g**2 * 8, g**3, 1, 103.5)}
    # Step 4 ends copies 0 and 1: their windows (steps 2, 3, 4) flush with shorter returns;
    # termination -> discount 0, truncation -> gamma^k bootstrap from the final obs.
    assert emitted[4] == {
        2: (4 + g * 8 + g**2 * 16, 0.0, 2, 4.5),
        3: (8 + g * 16, 0.0, 3, 4.5),
        4: (16.0, 0.0, 4, 4.5),
        102: (4 + g * 8 + g**2 * 16, g**3, 2, 104.5),
        103: (8 + g * 16, g**2, 3, 104.5),
        104: (16.0, g, 4, 104.5),
    }
    np.testing.assert_array_equal(windows.length, [0, 0, 2])  # copy 2 holds steps 3 and 4
    windows.clear()
    assert windows.length.sum() == 0


def test_one_step_windows_emit_every_valid_step():
    windows = NStepWindows(num_envs=2, n_step=1, gamma=0.9, obs_dim=1)
    out = windows.push(np.array([[0.0], [1.0]]), np.array([1, 0]), np.array([2.0, 3.0]),
                       np.array([[5.0], [6.0]]), np.array([False, True]),
                       np.array([False, True]), np.array([True, True]))
    np.testing.assert_allclose(out.rewards, [2.0, 3.0])
    np.testing.assert_allclose(out.discounts, [0.9, 0.0])
    np.testing.assert_array_equal(out.next_obs[:, 0], [5.0, 6.0])
    out = windows.push(np.zeros((2, 1)), np.zeros(2, int), np.ones(2), np.zeros((2, 1)),
                       np.zeros(2, bool), np.zeros(2, bool), np.array([False, True]))
    assert len(out) == 1 and windows.length.sum() == 0


def test_n_step_windows_state_round_trip():
    windows = NStepWindows(num_envs=2, n_step=3, gamma=0.9, obs_dim=1)
    for t in range(2):
        windows.push(np.full((2, 1), t), np.full(2, t), np.ones(2), np.zeros((2, 1)),
                     np.zeros(2, bool), np.zeros(2, bool), np.ones(2, bool))
    restored = NStepWindows(num_envs=2, n_step=3, gamma=0.9, obs_dim=1)
    restored.load_state_dict(windows.state_dict())
    args = (np.full((2, 1), 2.0), np.full(2, 2), np.ones(2), np.zeros((2, 1)),
            np.zeros(2, bool), np.zeros(2, bool), np.ones(2, bool))
    a, b = windows.push(*args), restored.push(*args)
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_allclose(a.rewards, 1 + 0.9 + 0.81, rtol=1e-6)
    with pytest.raises(ValueError, match="n-step window"):
        NStepWindows(num_envs=3, n_step=3, gamma=0.9, obs_dim=1).load_state_dict(
            windows.state_dict()
        )


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_one_step_shortcut_gives_what_the_windows_give(seed):
    """n_step = 1 skips the windows; on random steps (episode ends, truncations, NEXT_STEP
    reset steps) both paths emit the same transitions, field for field."""
    rng = np.random.default_rng(seed)
    shortcut = NStepWindows(num_envs=4, n_step=1, gamma=0.9, obs_dim=2)
    windowed = NStepWindows(num_envs=4, n_step=1, gamma=0.9, obs_dim=2)
    for _ in range(12):
        obs, next_obs = rng.normal(size=(2, 4, 2)).astype(np.float32)
        actions, rewards = rng.integers(3, size=4), rng.normal(size=4)
        terminated, truncated = rng.random(4) < 0.2, rng.random(4) < 0.2
        valid = rng.random(4) < 0.8
        args = (obs, actions, rewards, next_obs, terminated)
        fast = shortcut.push(*args, terminated | truncated, valid)
        slow = windowed._windowed(*args, terminated | truncated, valid)
        for field in ("obs", "actions", "rewards", "next_obs", "discounts"):
            np.testing.assert_array_equal(getattr(fast, field), getattr(slow, field))
            assert getattr(fast, field).dtype == getattr(slow, field).dtype
