"""Behaviour tests for plume.traces: the TraceSet container and the TraceBench generator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plume.traces import (
    BITRATES,
    DATASET_SEED,
    DATASETS,
    KINDS,
    SPLITS,
    TRACE_LEN,
    TraceSet,
    generate_all,
    generate_tracebench,
    load_tracebench,
)
from plume.traces import tracebench as tb


@pytest.fixture(scope="module")
def all_splits() -> dict[tuple[str, str], TraceSet]:
    return generate_all()


@pytest.fixture(scope="module")
def states() -> dict[str, np.ndarray]:
    """State sequences (0 = high, 1 = low) of every train split."""
    return {name: tb._generate(name, "train", DATASET_SEED)[1] for name in DATASETS}


# ---------------------------------------------------------------------------------------
# TraceBench: distribution
# ---------------------------------------------------------------------------------------

# Reference means (digest §1.1, verified there by re-implementation), rounded to 0.1.
REFERENCE_MEANS = {
    "fast_high-var": 7.5,
    "fast_low-var": 9.7,
    "slow_high-var": 2.2,
    "slow_low-var": 3.2,
}


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_per_kind_mean_throughput_matches_reference(all_splits, dataset):
    # Tolerance 0.15: the stationary means are 7.50 / 9.68 / 2.18 / 3.22, so the reference
    # figures are off by rounding (<= 0.02). The sampling error of a kind's mean is largest
    # for fast_high-var with 125 traces: per-trace means have std ~0.31, so SE ~0.028 and
    # 0.15 is > 4.5 SE beyond the rounding. A wrong level, mixture or window length moves a
    # mean by >= 0.3 (e.g. swapping the high-var windows gives fast 6.6).
    traces = all_splits[(dataset, "train")]
    for kind, expected in REFERENCE_MEANS.items():
        mean = traces.bandwidth[traces.labels == kind].mean()
        assert abs(mean - expected) < 0.15, (dataset, kind, mean)


@pytest.mark.parametrize(
    "dataset, counts",
    [
        ("majority_fast", (375, 375, 125, 125)),
        ("balanced", (250, 250, 250, 250)),
        ("majority_slow", (125, 125, 375, 375)),
    ],
)
def test_counts_and_order_of_kinds(all_splits, dataset, counts):
    n_fast, n_slow = DATASETS[dataset]
    for split in SPLITS:
        labels = all_splits[(dataset, split)].labels
        assert len(labels) == n_fast + n_slow == 1000
        assert tuple(int(np.sum(labels == kind)) for kind in KINDS) == counts
        # Reference order: fast first, then slow; high-var and low-var alternate.
        assert list(labels[:4]) == ["fast_high-var", "fast_low-var"] * 2
        assert list(labels[n_fast : n_fast + 2]) == ["slow_high-var", "slow_low-var"]
        assert all(label.startswith("fast") for label in labels[:n_fast])
        assert all(label.startswith("slow") for label in labels[n_fast:])
        assert np.all(labels[0::2] != labels[1::2])


def test_throughput_given_state_follows_the_state_normal(states):
    # Checks the state -> level mapping: fast high N(9.75, .65), fast low N(5.75, .5), ...
    traces = generate_tracebench("balanced", "train")
    for speed in (tb.FAST, tb.SLOW):
        rows = np.char.startswith(traces.labels, speed.name)
        for code, level in ((0, speed.high), (1, speed.low)):
            values = traces.bandwidth[rows][states["balanced"][rows] == code]
            assert values.size > 5000
            se = level.std / np.sqrt(values.size)
            assert abs(values.mean() - level.mean) < 5 * se + 0.005  # 0.005: clip at 0.1
            assert abs(values.std() - level.std) < 0.05 * level.std


# ---------------------------------------------------------------------------------------
# TraceBench: the window state machine
# ---------------------------------------------------------------------------------------


def _parse_windows(sequence: np.ndarray, window_of: dict[int, int]) -> list[int]:
    """Split a state sequence into windows from t = 0 on: a window starting in state s lasts
    window_of[s] steps with a constant state (the last may be cut by the trace end).
    Returns the state of each window; fails if a window is not constant."""
    starts, pos = [], 0
    while pos < len(sequence):
        state = int(sequence[pos])
        block = sequence[pos : pos + window_of[state]]
        assert np.all(block == state), (pos, sequence.tolist())
        starts.append(state)
        pos += window_of[state]
    return starts


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_generated_states_are_windows_of_the_right_length(all_splits, states, dataset):
    # low-var: high state holds 3 steps, low state 1; high-var: high 1, low 3. The window
    # redraws choose low with P = 0.05 (low-var) / 0.3 (high-var).
    labels = all_splits[(dataset, "train")].labels
    seq = states[dataset]
    for var, windows in ((tb.LOW_VAR, {0: 3, 1: 1}), (tb.HIGH_VAR, {0: 1, 1: 3})):
        rows = np.flatnonzero(np.char.endswith(labels, var.name))
        draws = np.concatenate([_parse_windows(seq[i], windows) for i in rows])
        se = np.sqrt(var.p_low * var.p_high / draws.size)
        assert abs(draws.mean() - var.p_low) < 5 * se, (var.name, draws.mean())


def test_state_machine_on_hand_checked_input():
    # Trace 0 low-var (P(high) .95, windows high 3 / low 1); trace 1 high-var (.7, 1 / 3).
    # A uniform >= P(high) picks low. Entries at steps that do not redraw are ignored: they
    # are set to values that would change the result if they were read.
    uniform = np.array(
        [
            [0.99, 0.80],  # t0: both redraw (window starts at 0): low(1) | low(3)
            [0.10, 0.00],  # t1: 0 redraws high(3) | 1 holds low
            [0.99, 0.00],  # t2: 0 holds | 1 holds
            [0.99, 0.10],  # t3: 0 holds | 1 redraws high(1)
            [0.96, 0.10],  # t4: 0 redraws low(1) | 1 redraws high(1)
            [0.96, 0.75],  # t5: 0 redraws low(1) | 1 redraws low(3)
            [0.50, 0.00],  # t6: 0 redraws high(3) | 1 holds
            [0.99, 0.00],  # t7: 0 holds | 1 holds
        ]
    )
    noise = np.zeros_like(uniform)
    noise[2, 0] = noise[7, 1] = -200.0  # a negative window if (wrongly) drawn there
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    states = tb._markov_states(
        uniform, noise, np.array([0.95, 0.7]), np.array([[3.0, 1.0], [1.0, 3.0]]), rng
    )
    assert states[:, 0].tolist() == [1, 0, 0, 0, 1, 1, 0, 0]
    assert states[:, 1].tolist() == [1, 1, 1, 0, 0, 1, 1, 1]
    assert rng.bit_generator.state == before  # no retry was needed


def test_negative_window_redraws_state_and_window():
    # Window mean 1 + 0.0125 * (-200) rounds to -2 < 0: the reference redraws both the state
    # and the window; those draws come from the retry generator, in that order.
    uniform = np.array([[0.0], [0.99]])
    noise = np.array([[-200.0], [0.0]])
    states = tb._markov_states(
        uniform, noise, np.array([0.5]), np.array([[1.0, 1.0]]), np.random.default_rng(3)
    )
    replay = np.random.default_rng(3)
    expected_first = int(replay.random() >= 0.5)
    assert states[:, 0].tolist() == [expected_first, 1]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 6),
    high_var=st.booleans(),
)
def test_state_machine_windows_property(seed, n, high_var):
    rng = np.random.default_rng(seed)
    var = tb.HIGH_VAR if high_var else tb.LOW_VAR
    means = np.tile([var.window_high.mean, var.window_low.mean], (n, 1))
    states = tb._markov_states(
        rng.random((30, n)), rng.standard_normal((30, n)), np.full(n, var.p_high), means, rng
    )
    windows = {0: int(var.window_high.mean), 1: int(var.window_low.mean)}
    for i in range(n):
        _parse_windows(states[:, i], windows)


# ---------------------------------------------------------------------------------------
# TraceBench: seeding, shapes, video, API
# ---------------------------------------------------------------------------------------


def test_generation_is_deterministic_and_each_split_stands_alone(all_splits):
    again = generate_tracebench("balanced", "test")
    reference = all_splits[("balanced", "test")]
    assert again.content_hash == reference.content_hash
    np.testing.assert_array_equal(again.bandwidth, reference.bandwidth)
    np.testing.assert_array_equal(again.chunks["video_sizes"], reference.chunks["video_sizes"])
    assert generate_tracebench("balanced", "test", seed=10).content_hash != again.content_hash


def _rows(traces: TraceSet) -> set[bytes]:
    return {row.tobytes() for row in traces.bandwidth}


def test_splits_and_datasets_share_no_trace(all_splits):
    seen: set[bytes] = set()
    for traces in all_splits.values():
        rows = _rows(traces)
        assert len(rows) == len(traces)
        assert not rows & seen, traces.name
        seen |= rows
    assert len({t.content_hash for t in all_splits.values()}) == 6


def test_shapes_ranges_and_metadata(all_splits):
    grid = np.linspace(0, 100, 100)
    for (dataset, split), traces in all_splits.items():
        assert traces.name == f"tracebench/{dataset}/{split}"
        assert traces.bandwidth.shape == traces.time.shape == (1000, TRACE_LEN)
        assert np.all(traces.lengths == TRACE_LEN)
        np.testing.assert_array_equal(traces.time, np.broadcast_to(grid, (1000, TRACE_LEN)))
        assert np.allclose(np.diff(traces.time, axis=1), 100 / 99)  # reference spacing
        assert traces.bandwidth.min() >= 0.1 and traces.bandwidth.max() <= 20.0
        assert traces.chunks["video_sizes"].shape == (1000, TRACE_LEN, 3)
        assert traces.chunks["video_sizes"].dtype == np.float64
        assert traces.trace_ids[0] == f"{dataset}/{split}/0000"
        assert traces.trace_ids[-1] == f"{dataset}/{split}/0999"
        assert traces.meta["generator"] == "tracebench"
        assert (traces.meta["dataset"], traces.meta["split"]) == (dataset, split)
        assert traces.meta["seed"] == DATASET_SEED
        assert set(traces.meta["units"]) == {"time", "bandwidth", "video_sizes"}
    # The slow low state N(1.35, .35) reaches the 0.1 floor now and then: clipping is active.
    slow = all_splits[("majority_slow", "train")].bandwidth
    assert np.any(slow == 0.1)


def test_video_sizes_are_bitrate_times_noise(all_splits):
    sizes = all_splits[("majority_fast", "train")].chunks["video_sizes"]
    ratio = sizes / BITRATES  # (1 + common) * (1 + per-bitrate)
    expected_std = np.hypot(0.01, 0.0005)
    assert abs(ratio.mean() - 1.0) < 1e-4  # SE = 0.01 / sqrt(1e5) ~ 3e-5
    assert abs(ratio.std() - expected_std) < 0.02 * expected_std  # SE of std ~ 0.2 %
    # Bitrates share the per-step factor: their ratios differ only by per-bitrate noise.
    spread = np.std(ratio[..., 2] / ratio[..., 0] - 1.0)
    assert abs(spread - np.sqrt(2) * 0.0005) < 0.05 * np.sqrt(2) * 0.0005
    assert np.all(np.argsort(sizes, axis=-1) == [0, 1, 2])  # ladder order is kept


def test_unknown_names_and_bad_seed_are_rejected():
    with pytest.raises(ValueError, match="majority_fast.*majority_slow"):
        generate_tracebench("majority_medium", "train")
    with pytest.raises(ValueError, match="'train', 'test'"):
        generate_tracebench("balanced", "validation")
    with pytest.raises(ValueError, match="'train', 'test'"):
        load_tracebench("balanced", "TRAIN")
    with pytest.raises(ValueError, match="non-negative"):
        generate_tracebench("balanced", "train", seed=-1)


def test_load_tracebench_caches_in_process(all_splits):
    first = load_tracebench("majority_slow", "test")
    assert load_tracebench("majority_slow", "test", DATASET_SEED) is first
    assert first.content_hash == all_splits[("majority_slow", "test")].content_hash
    assert not first.bandwidth.flags.writeable


# ---------------------------------------------------------------------------------------
# TraceSet
# ---------------------------------------------------------------------------------------


def test_save_load_round_trip(all_splits, tmp_path):
    traces = all_splits[("balanced", "train")].subset(np.arange(0, 1000, 7), name="bal-7")
    path = traces.save(tmp_path / "sub" / "traces")
    assert path.suffix == ".npz"
    loaded = TraceSet.load(path)
    assert loaded.content_hash == traces.content_hash
    assert loaded.name == "bal-7"
    assert loaded.meta == traces.meta
    np.testing.assert_array_equal(loaded.labels, traces.labels)
    np.testing.assert_array_equal(loaded.trace_ids, traces.trace_ids)
    np.testing.assert_array_equal(loaded.chunks["video_sizes"], traces.chunks["video_sizes"])


def _small(time=None, bandwidth=None, **overrides) -> dict:
    series = {
        "time": np.tile(np.arange(4.0), (3, 1)) if time is None else time,
        "bandwidth": np.ones((3, 4)) if bandwidth is None else bandwidth,
    }
    return {"name": "tiny", "series": series, "lengths": np.array([4, 4, 4]),
            "trace_ids": ["a", "b", "c"], **overrides}


def test_traceset_constructor_errors_name_the_trace():
    bandwidth = np.ones((3, 4))
    bandwidth[1, 2] = -0.5
    with pytest.raises(ValueError, match=r"'tiny': trace 'b' has a non-finite or negative value"):
        TraceSet(**_small(bandwidth=bandwidth))
    bandwidth[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"trace 'b' has a non-finite or negative value in "
                                         r"series\['bandwidth'\]"):
        TraceSet(**_small(bandwidth=bandwidth))
    time = np.tile(np.arange(4.0), (3, 1))
    time[2, 3] = time[2, 2]
    with pytest.raises(ValueError, match=r"'tiny': trace 'c' has non-increasing times"):
        TraceSet(**_small(time=time))
    with pytest.raises(ValueError, match=r"time \(3, 4\), bandwidth \(3, 5\)"):
        TraceSet(**_small(bandwidth=np.ones((3, 5))))
    bandwidth = np.ones((3, 4))
    bandwidth[0] = 0.0
    with pytest.raises(ValueError, match=r"'tiny': trace 'a' has zero throughput"):
        TraceSet(**_small(bandwidth=bandwidth))
    with pytest.raises(ValueError, match="labels must have shape"):
        TraceSet(**_small(labels=["a", "b"]))
    with pytest.raises(ValueError, match="trace ids must be unique"):
        TraceSet(**_small(trace_ids=["a", "a", "c"]))
    with pytest.raises(ValueError, match=r"constants\['loss'\] must have shape \(3,\)"):
        TraceSet(**_small(constants={"loss": np.zeros((3, 2))}))
    with pytest.raises(ValueError, match=r"trace 'c' has a non-finite or negative value in "
                                         r"constants\['loss'\]"):
        TraceSet(**_small(constants={"loss": np.array([0.0, 0.01, -0.1])}))
    # Padding beyond a trace's length is not validated.
    time = np.tile(np.arange(4.0), (3, 1))
    time[0, 3] = 0.0
    TraceSet(**_small(time=time, lengths=np.array([3, 4, 4])))


def test_a_traceset_of_constants_only_is_a_link_tuple_dataset():
    links = TraceSet("links", constants={"bandwidth": [100.0, 500.0], "loss": [0.0, 0.02]},
                     trace_ids=["slow", "fast"])
    assert len(links) == 2 and links.channel_names == ["constants/bandwidth", "constants/loss"]
    np.testing.assert_array_equal(links.channel("loss"), [0.0, 0.02])
    with pytest.raises(KeyError, match="has no channel 'latency'; it has constants/bandwidth"):
        links.channel("latency")


def test_save_load_roundtrips_every_channel_kind(tmp_path):
    traces = TraceSet(**_small(chunks={"ssim_db": np.arange(24.0).reshape(3, 4, 2)},
                               constants={"period": [5.0, 6.0, 7.0]}, labels=["x", "y", "x"],
                               meta={"units": {"time": "s"}}))
    loaded = TraceSet.load(traces.save(tmp_path / "t.npz"))
    assert loaded.content_hash == traces.content_hash
    assert loaded.channel_names == traces.channel_names and loaded.meta == traces.meta
    np.testing.assert_array_equal(loaded.chunks["ssim_db"], traces.chunks["ssim_db"])


def test_load_names_the_file_and_the_bad_key(tmp_path):
    from plume.traces.traceset import TraceSetFileError

    path = TraceSet(**_small()).save(tmp_path / "good.npz")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    np.savez(tmp_path / "no_ids.npz", **{k: v for k, v in arrays.items() if k != "trace_ids"})
    with pytest.raises(TraceSetFileError, match=r"no_ids.npz: missing key 'trace_ids'"):
        TraceSet.load(tmp_path / "no_ids.npz")
    np.savez(tmp_path / "bad_header.npz", **{**arrays, "header": np.array("{not json")})
    with pytest.raises(TraceSetFileError, match=r"bad_header.npz: key 'header' is not JSON"):
        TraceSet.load(tmp_path / "bad_header.npz")
    bandwidth = arrays["series__bandwidth"].copy()
    bandwidth[0, 0] = 7.0
    np.savez(tmp_path / "tampered.npz", **{**arrays, "series__bandwidth": bandwidth})
    with pytest.raises(TraceSetFileError, match=r"tampered.npz: content hash mismatch"):
        TraceSet.load(tmp_path / "tampered.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(TraceSetFileError, match=r"text.npz: not a TraceSet .npz archive"):
        TraceSet.load(tmp_path / "text.npz")
    with pytest.raises(TraceSetFileError, match=r"missing.npz: no such TraceSet file"):
        TraceSet.load(tmp_path / "missing.npz")


def test_subset_keeps_labels_chunks_and_ids(all_splits):
    traces = all_splits[("majority_fast", "test")]
    idx = [999, 0, 500, 0]
    sub = traces.subset(idx)
    assert len(sub) == 4
    np.testing.assert_array_equal(sub.labels, traces.labels[idx])
    ids = traces.trace_ids[idx].tolist()
    assert sub.trace_ids.tolist() == [*ids[:3], ids[3] + "#1"]  # a repeat gets a unique id
    np.testing.assert_array_equal(sub.chunks["video_sizes"], traces.chunks["video_sizes"][idx])
    assert sub.meta == traces.meta


@st.composite
def _trace_sets(draw):
    n = draw(st.integers(1, 6))
    width = draw(st.integers(2, 7))
    lengths = np.array(draw(st.lists(st.integers(2, width), min_size=n, max_size=n)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    valid = np.arange(width)[None, :] < lengths[:, None]
    time = np.where(valid, np.cumsum(rng.uniform(0.1, 2.0, (n, width)), axis=1), 0.0)
    bandwidth = np.where(valid, rng.uniform(0.1, 5.0, (n, width)), 0.0)
    traces = TraceSet(
        name="prop",
        series={"time": time, "bandwidth": bandwidth},
        lengths=lengths,
        labels=np.array([f"k{i % 2}" for i in range(n)]),
        chunks={"side": rng.normal(size=(n, 3))},
    )
    indices = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=10))
    return traces, indices


@settings(max_examples=60, deadline=None)
@given(_trace_sets())
def test_subset_preserves_rows_property(case):
    traces, indices = case
    sub = traces.subset(indices)
    assert len(sub) == len(indices)
    assert sub.bandwidth.shape[1] == traces.lengths[indices].max()
    for j, i in enumerate(indices):
        length = traces.lengths[i]
        assert sub.lengths[j] == length
        np.testing.assert_array_equal(sub.bandwidth[j, :length], traces.bandwidth[i, :length])
        np.testing.assert_array_equal(sub.time[j, :length], traces.time[i, :length])
        assert sub.labels[j] == traces.labels[i]
        assert sub.trace_ids[j].split("#")[0] == traces.trace_ids[i]
        np.testing.assert_array_equal(sub.chunks["side"][j], traces.chunks["side"][i])
    # The hash identifies content: the same selection twice hashes alike, and selecting
    # every trace in order reproduces the original hash.
    assert traces.subset(indices).content_hash == sub.content_hash
    assert traces.subset(range(len(traces))).content_hash == traces.content_hash


def test_the_content_hash_covers_units_but_not_provenance():
    base = TraceSet(**_small(meta={"units": {"bandwidth": "Mbit/s"}, "source": "a/"}))
    moved = TraceSet(**_small(meta={"units": {"bandwidth": "Mbit/s"}, "source": "b/"}))
    other_units = TraceSet(**_small(meta={"units": {"bandwidth": "MB/s"}, "source": "a/"}))
    assert base.content_hash == moved.content_hash
    assert base.content_hash != other_units.content_hash
