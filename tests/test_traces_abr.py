"""Behaviour tests for plume.traces.abr: Puffer-like and Pensieve-like datasets with skew."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plume.traces import abr
from plume.traces.abr import (
    ABR_DATASETS,
    CHUNK_SECONDS,
    DATASET_SEED,
    MIN_CHUNKS,
    N_ENCODINGS,
    PENSIEVE_KINDS,
    PUFFER_KINDS,
    SIZE_LADDER_BYTES,
    SPLITS,
    SSIM_DB_LADDER,
    STREAM_ORDER,
    TOP_BITRATE_MBPS,
    generate_abr_dataset,
    generate_pensieve_like,
    generate_puffer_like,
    load_abr_dataset,
    share_below,
    top_encoding_bitrate,
)
from plume.traces.traceset import TraceSet


@pytest.fixture(scope="module")
def splits() -> dict[tuple[str, str], TraceSet]:
    return {key: generate_abr_dataset(*key) for key in STREAM_ORDER}


@pytest.fixture(scope="module")
def puffer(splits) -> TraceSet:
    return splits[("puffer_synthetic", "train")]


@pytest.fixture(scope="module")
def pensieve(splits) -> TraceSet:
    return splits[("pensieve_synthetic", "train")]


def _valid_rows(traces: TraceSet, key: str) -> list[np.ndarray]:
    return [traces.series[key][i, :n] for i, n in enumerate(traces.lengths)]


def _cv(traces: TraceSet) -> np.ndarray:
    return np.array([b.std() / b.mean() for b in _valid_rows(traces, "bandwidth")])


def _ac1(x: np.ndarray) -> float:
    x = x - x.mean()
    return float((x[:-1] * x[1:]).sum() / ((len(x) - 1) * x.var()))


def _kind_rows(traces: TraceSet, kind: str) -> TraceSet:
    return traces.subset(np.flatnonzero(traces.labels == kind))


# ---------------------------------------------------------------------------------------
# Determinism, streams, registry
# ---------------------------------------------------------------------------------------


def test_same_seed_same_content_and_splits_differ(splits):
    for key, traces in splits.items():
        assert generate_abr_dataset(*key).content_hash == traces.content_hash
    hashes = {traces.content_hash for traces in splits.values()}
    assert len(hashes) == len(splits)
    assert generate_abr_dataset("puffer_synthetic", "train", seed=1).content_hash != (
        splits[("puffer_synthetic", "train")].content_hash)
    for name in ABR_DATASETS:  # train and test are independent draws: no shared trace
        train, test = (splits[(name, s)] for s in SPLITS)
        rows = [{tuple(row) for row in _valid_rows(t, "bandwidth")} for t in (train, test)]
        assert not rows[0] & rows[1]


@pytest.mark.parametrize(
    "generate, base, extra, big_n, kind",
    [
        (generate_puffer_like, {"medium": 1.0}, {"medium": 1.0, "slow_variable": 2.0}, 24,
         "medium"),
        (generate_puffer_like, {"slow_variable": 1.0}, None, 300, "slow_variable"),
        (generate_pensieve_like, {"hsdpa_like": 1.0}, {"hsdpa_like": 1.0, "slow": 1.0}, 24,
         "hsdpa_like"),
        (generate_pensieve_like, {"slow": 1.0}, None, 60, "slow"),
    ],
)
def test_adding_kinds_or_traces_does_not_reshuffle_a_kind(generate, base, extra, big_n, kind):
    # Each kind's j-th trace depends only on (seed, stream, kind, j): other kinds' weights,
    # new kinds and a larger n leave it unchanged (it may move in the interleaved order).
    small = generate(8, 5, base)
    big = generate(big_n, 5, extra)  # with extra=None: the default mix, every kind present
    mine, theirs = _kind_rows(small, kind), _kind_rows(big, kind)
    assert len(theirs) >= len(mine) == 8
    for key in ("time", "bandwidth"):
        for a, b in zip(_valid_rows(mine, key), _valid_rows(theirs, key)):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(mine.lengths, theirs.lengths[:8])
    for key, value in mine.chunks.items():
        width = value.shape[1]
        np.testing.assert_array_equal(value, theirs.chunks[key][:8, :width])


def test_kinds_are_interleaved_not_grouped(puffer):
    first = puffer.labels[:100]
    assert len(set(first.tolist())) >= 4
    assert 0.4 < np.mean(first == "fast_stable") < 0.6


def test_kind_counts_are_exact_largest_remainder(splits):
    counts = {"fast_stable": 500, "fast_variable": 230, "medium": 200, "slow_stable": 40,
              "slow_variable": 30}
    puffer = splits[("puffer_synthetic", "train")]
    assert {k: int(np.sum(puffer.labels == k)) for k in counts} == counts
    assert puffer.meta["kind_counts"] == counts
    pensieve = splits[("pensieve_synthetic", "test")]  # 150 * (.40, .45, .15) = 60, 67.5, 22.5
    assert [int(np.sum(pensieve.labels == k)) for k in PENSIEVE_KINDS] == [60, 68, 22]


def test_registry_sizes_ids_and_meta(splits):
    assert set(ABR_DATASETS) == {"puffer_synthetic", "pensieve_synthetic"}
    assert ABR_DATASETS["puffer_synthetic"].sizes == {"train": 1000, "test": 300}
    assert ABR_DATASETS["pensieve_synthetic"].sizes == {"train": 500, "test": 150}
    for (name, split), traces in splits.items():
        assert isinstance(ABR_DATASETS[name].description, str)
        assert len(traces) == ABR_DATASETS[name].sizes[split]
        assert traces.name == f"{name}/{split}"
        assert traces.trace_ids[0] == f"{name}/{split}/0000"
        meta = traces.meta
        assert meta["seed"] == DATASET_SEED
        assert f"spawn_key=({STREAM_ORDER.index((name, split))},)" in meta["stream"]
        assert meta["generator"] in ("puffer_like", "pensieve_like")
        assert meta["units"]["time"] == "s" and meta["units"]["bandwidth"] == "Mbit/s"
        assert abs(sum(meta["class_weights"].values()) - 1) < 1e-12
    assert splits[("puffer_synthetic", "test")].meta["units"]["chunk_sizes"] == "MB"
    assert splits[("puffer_synthetic", "test")].meta["units"]["ssim_db"] == "dB"


def test_load_abr_dataset_memoises_read_only(splits):
    a = load_abr_dataset("pensieve_synthetic", "test")
    assert load_abr_dataset("pensieve_synthetic", "test") is a
    assert a.content_hash == splits[("pensieve_synthetic", "test")].content_hash
    assert not a.bandwidth.flags.writeable
    with pytest.raises(ValueError):
        a.bandwidth[0, 0] = 1.0


def test_bad_names_weights_and_arguments_are_rejected():
    with pytest.raises(ValueError, match="pensieve_synthetic.*puffer_synthetic"):
        load_abr_dataset("puffer", "train")
    with pytest.raises(ValueError, match=r"\['train', 'test'\]"):
        generate_abr_dataset("puffer_synthetic", "validation")
    with pytest.raises(ValueError, match="fast_stable"):
        generate_puffer_like(5, 0, {"fast": 1.0})
    with pytest.raises(ValueError, match="fcc_like"):
        generate_pensieve_like(5, 0, {"fcc": 1.0})
    for weights in ({"fast_stable": -1.0, "medium": 2.0}, {"medium": 0.0},
                    {"medium": float("nan")}):
        with pytest.raises(ValueError, match="class_weights"):
            generate_puffer_like(5, 0, weights)
    with pytest.raises(ValueError, match="seed"):
        load_abr_dataset("puffer_synthetic", "train", seed=-1)
    with pytest.raises(TypeError, match="seed"):
        generate_pensieve_like(5, 1.5)
    with pytest.raises(ValueError, match="n must be"):
        generate_puffer_like(0, 0)
    with pytest.raises(ValueError, match="max_chunks"):
        generate_puffer_like(5, 0, max_chunks=50)


@pytest.mark.parametrize("key", STREAM_ORDER)
def test_each_builtin_split_generates_quickly(key):
    generate_abr_dataset(*key)  # warm-up (imports, caches)
    start = time.perf_counter()
    generate_abr_dataset(*key)
    assert time.perf_counter() - start < 5.0  # about 0.3 s for puffer train on 2 cores


def test_save_load_round_trip_keeps_float32_chunks(tmp_path):
    traces = generate_puffer_like(6, 3, max_chunks=100)
    loaded = TraceSet.load(traces.save(tmp_path / "p.npz"))
    assert loaded.content_hash == traces.content_hash
    assert loaded.chunks["chunk_sizes"].dtype == np.float32


# ---------------------------------------------------------------------------------------
# Puffer-like sessions
# ---------------------------------------------------------------------------------------


def test_puffer_shapes_dtypes_and_padding(splits):
    for split in SPLITS:
        traces = splits[("puffer_synthetic", split)]
        n, width = traces.time.shape
        assert traces.chunks["chunk_sizes"].shape == traces.chunks["ssim_db"].shape == (
            n, width, N_ENCODINGS)
        assert traces.chunks["chunk_sizes"].dtype == traces.chunks["ssim_db"].dtype == np.float32
        assert traces.time.dtype == traces.bandwidth.dtype == np.float64
        valid = traces.valid_mask()
        assert np.all(traces.time[:, 0] == 0)
        assert np.all((np.diff(traces.time, axis=1) > 0) | ~valid[:, 1:])
        assert np.all(traces.bandwidth[valid] >= 0.1)
        for channel in (traces.time, traces.bandwidth):
            assert np.all(channel[~valid] == 0)
        assert np.all(traces.chunks["chunk_sizes"][~valid] == 0)
        assert not traces.constants  # the last row holds 1 s, as in Plume's Puffer sim


def test_session_lengths_are_valid_episode_sources_and_heavy_tailed(puffer):
    lengths = puffer.lengths
    assert lengths.min() >= MIN_CHUNKS == 91 and lengths.max() <= 300
    assert np.median(lengths) < 150 < 250 < lengths.max()  # most short, a long tail
    assert np.mean(lengths) > np.median(lengths)


def test_encodings_increase_on_every_chunk(splits):
    for split in SPLITS:
        traces = splits[("puffer_synthetic", split)]
        valid = traces.valid_mask()
        sizes, ssim = (traces.chunks[k][valid].astype(np.float64)
                       for k in ("chunk_sizes", "ssim_db"))
        assert np.all(sizes > 0)
        assert np.all(np.diff(sizes, axis=1) > 0)
        assert np.all(np.diff(ssim, axis=1) > 0)
        assert np.all(ssim > 0) and np.all(ssim < 50)


def test_video_follows_the_bola_ladder_and_complexity(puffer):
    valid = puffer.valid_mask()
    sizes = puffer.chunks["chunk_sizes"][valid].astype(np.float64)
    ssim = puffer.chunks["ssim_db"][valid].astype(np.float64)
    np.testing.assert_allclose(sizes.mean(axis=0), SIZE_LADDER_BYTES * 1e-6, rtol=0.08)
    np.testing.assert_allclose(ssim.mean(axis=0), SSIM_DB_LADDER, atol=0.3)
    assert abs(top_encoding_bitrate(puffer) - TOP_BITRATE_MBPS) < 0.1 * TOP_BITRATE_MBPS
    assert abs(TOP_BITRATE_MBPS - 889893 * 8e-6 / 2.002) < 1e-12
    # Sizes vary per chunk (scene complexity shared by all encodings) ...
    cv_top = sizes[:, -1].std() / sizes[:, -1].mean()
    assert 0.2 < cv_top < 0.6
    assert np.corrcoef(np.log(sizes[:, 0]), np.log(sizes[:, -1]))[0, 1] > 0.8
    # ... and complex scenes mean bigger chunks and lower SSIM.
    assert np.corrcoef(np.log(sizes[:, 5]), ssim[:, 5])[0, 1] < -0.5


def test_send_times_are_chunk_paced_with_longer_gaps(puffer):
    gaps = np.diff(puffer.time, axis=1)[puffer.valid_mask()[:, 1:]]
    assert abs(np.median(gaps) - CHUNK_SECONDS) < 0.05
    assert np.mean(np.abs(gaps - CHUNK_SECONDS) < 0.2) > 0.8  # full buffer: ~2.002 s
    assert np.std(gaps[np.abs(gaps - CHUNK_SECONDS) < 0.2]) > 0.01  # jittered
    assert gaps.max() <= abr.MAX_GAP_S + 1e-9  # (+ rounding of the cumulative sum)
    slow = _kind_rows(puffer, "slow_variable")
    slow_gaps = np.diff(slow.time, axis=1)[slow.valid_mask()[:, 1:]]
    assert np.mean(slow_gaps > 3.0) > 0.01  # downloads slower than real time stretch gaps


def test_default_skew_reproduces_fig2(splits):
    for split in SPLITS:
        traces = splits[("puffer_synthetic", split)]
        below = share_below(traces, top_encoding_bitrate(traces))
        assert 0.01 < below < 0.065, (split, below)
        slow = share_below(traces, abr.PUFFER_SLOW_MBPS)
        assert 0.04 < slow < 0.15, (split, slow)  # a small minority, under 20 %
        means = traces.mean_bandwidth()
        assert 15 < np.median(means) < 60  # most sessions: tens of Mbit/s
        assert np.percentile(means, 99) > 4 * np.median(means)  # heavy upper tail


def test_class_weights_move_the_skew_in_the_expected_direction(puffer):
    base = share_below(puffer, TOP_BITRATE_MBPS)
    heavy_slow = generate_puffer_like(300, 11, {"fast_stable": 1.0, "slow_stable": 1.0,
                                                "slow_variable": 1.0})
    assert share_below(heavy_slow, TOP_BITRATE_MBPS) > base + 0.2
    assert share_below(heavy_slow, abr.PUFFER_SLOW_MBPS) > 0.5
    fast_only = generate_puffer_like(200, 11, {"fast_stable": 1.0})
    assert share_below(fast_only, TOP_BITRATE_MBPS) == 0.0
    assert set(fast_only.labels.tolist()) == {"fast_stable"}


# kind: (median session mean in Mbit/s, median within-session cv), documented ranges.
PUFFER_RANGES = {
    "fast_stable": ((30, 55), (0.05, 0.20)),
    "fast_variable": ((18, 35), (0.30, 0.70)),
    "medium": ((7, 12), (0.10, 0.35)),
    "slow_stable": ((2.5, 5), (0.05, 0.25)),
    "slow_variable": ((1.5, 3.5), (0.35, 0.90)),
}


@pytest.mark.parametrize("kind", list(PUFFER_KINDS))
def test_puffer_kind_statistics(puffer, kind):
    rows = _kind_rows(puffer, kind)
    (mean_lo, mean_hi), (cv_lo, cv_hi) = PUFFER_RANGES[kind]
    assert mean_lo < np.median(rows.mean_bandwidth()) < mean_hi
    assert cv_lo < np.median(_cv(rows)) < cv_hi
    level = PUFFER_KINDS[kind].level
    assert np.all(rows.mean_bandwidth() > 0.5 * level.low)
    # Outages (slow_variable only): deep dips, down to the 0.1 Mbit/s floor.
    dips = np.array([b.min() / b.mean() for b in _valid_rows(rows, "bandwidth")])
    if kind == "slow_variable":
        assert np.median(dips) < 0.15 and np.any(rows.bandwidth[rows.valid_mask()] == 0.1)
    elif kind.endswith("stable"):
        assert np.median(dips) > 0.5


# ---------------------------------------------------------------------------------------
# Pensieve-like traces
# ---------------------------------------------------------------------------------------


def test_pensieve_shapes_units_and_period(splits):
    for split in SPLITS:
        traces = splits[("pensieve_synthetic", split)]
        assert not traces.chunks
        np.testing.assert_array_equal(traces.constants["period"], 320.0)
        last = traces.time[np.arange(len(traces)), traces.lengths - 1]
        assert np.all(traces.time[:, 0] == 0) and np.all(last < 320.0) and np.all(last > 314)
        assert np.all(traces.bandwidth[traces.valid_mask()] >= 0.1)
        assert traces.meta["units"]["period"] == "s"


def test_pensieve_sampling_intervals_per_kind(pensieve):
    fcc, hsdpa, slow = (_kind_rows(pensieve, k) for k in ("fcc_like", "hsdpa_like", "slow"))
    fcc_dt = np.diff(fcc.time, axis=1)[fcc.valid_mask()[:, 1:]]
    np.testing.assert_array_equal(fcc_dt, 5.0)
    assert np.all(fcc.lengths == 64)
    hsdpa_dt = np.diff(hsdpa.time, axis=1)[hsdpa.valid_mask()[:, 1:]]
    assert abs(hsdpa_dt.mean() - 1.0) < 0.03 and hsdpa_dt.std() > 0.1
    assert hsdpa_dt.min() > 0.6 - 1e-9 and hsdpa_dt.max() < 1.5 + 1e-9
    np.testing.assert_array_equal(np.diff(slow.time, axis=1), 1.0)
    assert np.all(slow.lengths == 320)


def test_pensieve_kind_statistics_and_slow_share(splits):
    for split in SPLITS:
        traces = splits[("pensieve_synthetic", split)]
        fcc, hsdpa, slow = (_kind_rows(traces, k) for k in ("fcc_like", "hsdpa_like", "slow"))
        assert 0.15 < np.median(_cv(fcc)) < 0.25  # smooth, cv about 0.2
        assert 0.40 < np.median(_cv(hsdpa)) < 0.60  # volatile, cv about 0.5
        assert np.median([_ac1(b) for b in _valid_rows(hsdpa, "bandwidth")]) > 0.65
        assert np.all(slow.mean_bandwidth() < 0.75) and np.all(slow.mean_bandwidth() > 0.25)
        for rows in (fcc, hsdpa):
            assert 1.2 < np.median(rows.mean_bandwidth()) < 2.5
        assert abs(np.mean(traces.labels == "slow") - 0.15) < 0.01
        assert abs(share_below(traces, abr.PENSIEVE_SLOW_MBPS) - 0.15) < 0.02


def test_markov_chain_semantics_on_controlled_input():
    n, width = 3, 12
    levels = abr._MARKOV_LEVELS
    state = np.array([0, 4, 9])
    z = np.tile(np.arange(1, width + 1, dtype=float), (n, 1))
    u = np.full((n, width, 3), 0.5)
    # Never moving (stay prob 1): the level is constant, the noise redrawn every T_s = 3.
    raw = abr._markov_chain(np.ones(n), u, z, state, np.full(n, 3.0), np.full(n, 0.1))
    expected_z = np.repeat([1.0, 4.0, 7.0, 10.0], 3)
    np.testing.assert_allclose(raw, levels[state][:, None] * (1 + 0.1 * expected_z))
    # Always moving with noise off: the chain stays on the grid and every step changes level.
    moving = abr._markov_chain(np.zeros(n), np.random.default_rng(0).random((n, 50, 3)),
                               np.zeros((n, 50)), state, np.full(n, 3.0), np.zeros(n))
    assert np.all(np.isin(moving, levels)) and np.all(np.diff(moving, axis=1) != 0)
    weights = abr._jump_weights()
    assert abs(weights.sum() - 1) < 1e-9 and np.all(np.diff(weights) < 0)


def test_scale_to_mean_hits_the_target_with_the_floor():
    raw = np.random.default_rng(1).uniform(-0.5, 4.0, size=(4, 300))
    target = np.array([0.3, 0.5, 0.7, 2.0])
    scaled = abr._scale_to_mean(raw, target)
    np.testing.assert_allclose(scaled.mean(axis=1), target, rtol=1e-6)
    assert scaled.min() == 0.1


# ---------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------

_weights = st.dictionaries(st.sampled_from(list(PUFFER_KINDS)),
                           st.floats(0.0, 10.0, allow_nan=False), min_size=1).filter(
    lambda w: sum(w.values()) > 0)


@settings(max_examples=25, deadline=None)
@given(weights=_weights, seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12),
       max_chunks=st.integers(91, 110))
def test_any_weights_give_a_valid_puffer_set(weights, seed, n, max_chunks):
    traces = generate_puffer_like(n, seed, weights, max_chunks=max_chunks)
    assert len(traces) == n
    positive = {k for k, w in weights.items() if w > 0}
    assert set(traces.labels.tolist()) <= positive
    total = sum(weights.values())
    for kind in PUFFER_KINDS:
        quota = n * weights.get(kind, 0.0) / total
        assert abs(np.sum(traces.labels == kind) - quota) < 1
    assert np.all((traces.lengths >= MIN_CHUNKS) & (traces.lengths <= max_chunks))
    sizes = traces.chunks["chunk_sizes"][traces.valid_mask()]
    assert np.all(np.diff(sizes, axis=1) > 0)
    assert generate_puffer_like(n, seed, weights, max_chunks=max_chunks).content_hash == (
        traces.content_hash)


@settings(max_examples=25, deadline=None)
@given(weights=st.dictionaries(st.sampled_from(list(PENSIEVE_KINDS)),
                               st.floats(0.0, 10.0, allow_nan=False), min_size=1).filter(
           lambda w: sum(w.values()) > 0),
       seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12))
def test_any_weights_give_a_valid_pensieve_set(weights, seed, n):
    traces = generate_pensieve_like(n, seed, weights)
    assert len(traces) == n
    assert set(traces.labels.tolist()) <= {k for k, w in weights.items() if w > 0}
    assert np.all(traces.time[np.arange(n), traces.lengths - 1] < 320.0)
    slow = traces.labels == "slow"
    assert np.all(traces.mean_bandwidth()[slow] < 0.75)
