"""LB job-sequence traces: Park's generator, the skewed regime mix, CSV files."""

from __future__ import annotations

import numpy as np
import pytest

from plume.traces.lb import (
    CAPACITY,
    LB_KINDS,
    N_JOBS,
    generate_lb_dataset,
    generate_lb_mixed,
    generate_park,
    load_lb_dataset,
    read_lb_csv,
    write_lb_csv,
)
from plume.traces.loaders import TraceFileError, describe_split, in_test_split, load_traces


def realised_load(traces) -> np.ndarray:
    gaps, sizes = traces.series["interarrival"], traces.series["job_size"]
    return sizes.mean(axis=1) / (gaps.mean(axis=1) * CAPACITY)


def lag_autocorrelation(x: np.ndarray, lag: int = 1) -> np.ndarray:
    """Per-row lag autocorrelation (whole-row mean and variance)."""
    centred = x - x.mean(axis=1, keepdims=True)
    return (centred[:, :-lag] * centred[:, lag:]).mean(axis=1) / centred.var(axis=1)


# --------------------------------------------------------------------------- park
def test_park_dataset_follows_parks_generator():
    traces = load_lb_dataset("park", "train")
    gaps, sizes = traces.series["interarrival"], traces.series["job_size"]
    assert len(traces) == 1000 and set(traces.lengths.tolist()) == {N_JOBS}
    assert set(traces.labels.tolist()) == {"park"}
    assert np.array_equal(gaps, np.floor(gaps)) and np.array_equal(sizes, np.floor(sizes))
    assert sizes.min() >= 100  # int((Lomax + 1) * 100) never goes below the scale
    # int(Exp(55)): mean 1 / (e^(1/55) - 1) = 54.50, P(gap = 0) = 1 - e^(-1/55) = 1.80 %
    assert gaps.mean() == pytest.approx(54.50, abs=0.3)
    assert (gaps == 0).mean() == pytest.approx(1 - np.exp(-1 / 55), abs=0.001)
    # Pareto(1.5, 100): median 100 * 2^(1/1.5) = 158.7 before truncation
    assert np.median(sizes) == pytest.approx(158.0, abs=2.0)
    assert np.median(realised_load(traces)) == pytest.approx(0.87, abs=0.03)  # heavy tail:
    # the theoretical 0.916 is reached only in the mean (infinite variance)
    assert traces.constants["offered_load"][0] == pytest.approx(299.5 / (54.50 * 6.0), abs=1e-3)


# --------------------------------------------------------------------------- lb_mixed
def test_lb_mixed_has_an_exact_skewed_composition_interleaved():
    train, test = load_lb_dataset("lb_mixed", "train"), load_lb_dataset("lb_mixed", "test")
    counts = {k: int((train.labels == k).sum()) for k in LB_KINDS}
    assert counts == {"typical": 600, "heavy_tail": 100, "bimodal": 100, "batch": 100,
                      "bursty": 100}
    assert {k: int((test.labels == k).sum()) for k in LB_KINDS} == {
        "typical": 150, "heavy_tail": 25, "bimodal": 25, "batch": 25, "bursty": 25}
    assert set(train.labels[:100].tolist()) == set(LB_KINDS)  # no kind waits at the end
    balanced = load_lb_dataset("lb_balanced", "train")
    assert {k: int((balanced.labels == k).sum()) for k in LB_KINDS} == dict.fromkeys(
        LB_KINDS, 200)
    for traces in (train, test):
        values = np.concatenate([traces.series["interarrival"], traces.series["job_size"]])
        assert np.array_equal(values, np.floor(values)) and values.min() >= 0


def test_each_regime_has_its_ground_truth_signature():
    traces = generate_lb_mixed(250, 11, dict.fromkeys(LB_KINDS, 1.0), n_jobs=N_JOBS)
    kind = {k: traces.labels == k for k in LB_KINDS}
    gaps, sizes = traces.series["interarrival"], traces.series["job_size"]
    target = traces.constants["offered_load"]
    tail, burst = traces.constants["tail_index"], traces.constants["burstiness"]
    for name, spec in LB_KINDS.items():
        m = kind[name]
        assert np.all((target[m] >= spec.load[0]) & (target[m] <= spec.load[1]))
        assert np.all((tail[m] >= spec.tail[0]) & (tail[m] <= spec.tail[1]))
        assert np.all((burst[m] >= spec.burst[0]) & (burst[m] <= spec.burst[1]))
        # the gap law is tuned to the target load; a heavy-tailed sample mean is usually
        # below its expectation, so the per-trace median ratio sits a little under 1
        ratio = np.median(realised_load(traces)[m] / target[m])
        assert 0.85 < ratio < 1.08, (name, ratio)
    pooled = sizes[kind["typical"]].sum() / gaps[kind["typical"]].sum() / CAPACITY
    assert pooled == pytest.approx(target[kind["typical"]].mean(), rel=0.05)
    p99 = np.quantile(sizes, 0.99, axis=1)
    assert np.median(p99[kind["heavy_tail"]]) > 3 * np.median(p99[kind["typical"]])
    elephants = (sizes >= 2000).mean(axis=1)[kind["bimodal"]]
    assert np.all((elephants > 0.005) & (elephants < 0.15))
    assert np.median(sizes[kind["bimodal"]]) <= 80
    zero_gaps = (gaps == 0).mean(axis=1)
    assert zero_gaps[kind["batch"]].min() > 0.5 and zero_gaps[kind["typical"]].max() < 0.05
    size_ac = lag_autocorrelation(np.log1p(sizes))
    assert size_ac[kind["batch"]].min() > 0.3 and np.abs(size_ac[kind["typical"]]).max() < 0.2
    cv = gaps.std(axis=1) / gaps.mean(axis=1)
    assert np.median(cv[kind["bursty"]]) > np.median(cv[kind["typical"]]) + 0.1
    # bursty differs from typical in its arrivals only: the same size law
    assert np.median(sizes[kind["bursty"]]) == pytest.approx(np.median(sizes[kind["typical"]]),
                                                            rel=0.05)


def test_generation_is_deterministic_and_each_kinds_traces_stable_under_reweighting():
    assert generate_lb_dataset("lb_mixed", "train").content_hash == \
        load_lb_dataset("lb_mixed", "train").content_hash
    assert load_lb_dataset("lb_mixed", "train").content_hash != \
        load_lb_dataset("lb_mixed", "test").content_hash
    mixed = generate_lb_mixed(40, 5, n_jobs=60)
    alone = generate_lb_mixed(30, 5, {"batch": 1.0}, n_jobs=60)
    batch = mixed.labels == "batch"
    assert 0 < batch.sum() <= 30
    for key in ("interarrival", "job_size"):
        np.testing.assert_array_equal(mixed.series[key][batch], alone.series[key][: batch.sum()])
    assert generate_park(3, 1).content_hash != generate_park(3, 2).content_hash


def test_generator_arguments_are_checked():
    with pytest.raises(ValueError, match="unknown kinds"):
        generate_lb_mixed(10, 0, {"nope": 1.0})
    with pytest.raises(ValueError, match="not all zero"):
        generate_lb_mixed(10, 0, {"typical": 0.0})
    with pytest.raises(ValueError, match="n must be >= 1"):
        generate_lb_mixed(0, 0)
    with pytest.raises(ValueError, match="unknown LB dataset"):
        load_lb_dataset("nope", "train")
    with pytest.raises(ValueError, match="unknown split"):
        load_lb_dataset("park", "val")


# --------------------------------------------------------------------------- CSV
def test_csv_round_trip_with_header_and_simultaneous_arrivals(tmp_path):
    gaps, sizes = np.array([5.0, 0.0, 12.0, 3.0]), np.array([150.0, 0.0, 4000.0, 101.0])
    path = write_lb_csv(tmp_path / "a.csv", gaps, sizes, service_rates=(0.5, 2.0))
    assert path.read_text().splitlines() == [
        "# servers=2 rates=0.5,2.0", "arrival_time,size", "5,150", "5,0", "17,4000", "20,101"]
    jobs = read_lb_csv(path)
    np.testing.assert_array_equal(jobs.interarrival, gaps)
    np.testing.assert_array_equal(jobs.job_size, sizes)
    assert jobs.header == {"servers": 2, "rates": [0.5, 2.0]}
    bare = write_lb_csv(tmp_path / "b.csv", gaps, sizes, service_rates=None)
    assert read_lb_csv(bare).header == {}
    assert len(read_lb_csv(path, max_jobs=2).job_size) == 2


def test_a_csv_folder_loads_with_the_hash_split_and_ragged_lengths(tmp_path):
    rng = np.random.default_rng(0)
    names = [f"job{i:02d}" for i in range(12)]
    for i, name in enumerate(names):
        n = 3 + i
        write_lb_csv(tmp_path / "lb" / f"{name}.csv", rng.integers(0, 60, n),
                     rng.integers(1, 900, n))
    every = load_traces(tmp_path / "lb", "csv", "all")
    assert every.trace_ids.tolist() == names and every.lengths.tolist() == list(range(3, 15))
    assert every.meta["files"]["job00"] == "job00.csv" and every.meta["format"] == "csv"
    assert every.meta["units"] == {"interarrival": "time units", "job_size": "work units"}
    test = load_traces(tmp_path / "lb", "csv", "test")
    assert test.trace_ids.tolist() == [n for n in names if in_test_split(n)]
    assert "csv_headers" in every.meta
    assert f"-> test ({len(test)} of 12 traces)" in describe_split(tmp_path / "lb", "csv")
    again = read_lb_csv(tmp_path / "lb" / "job05.csv")
    np.testing.assert_array_equal(every.series["job_size"][5, :8], again.job_size)


def test_long_files_are_capped_at_650_jobs(tmp_path):
    write_lb_csv(tmp_path / "long.csv", np.ones(700), np.full(700, 100.0))
    traces = load_traces(tmp_path / "long.csv", "csv", "all")
    assert traces.lengths.tolist() == [650] and traces.meta["max_jobs"] == 650


@pytest.mark.parametrize("lines, line, message", [
    (["arrival_time,size", "1,100", "2,abc"], 3, "size 'abc' is not a number"),
    (["1,100", "-3,100"], 2, "arrival_time '-3' is negative"),
    (["1,100", "2,-1"], 2, "size '-1' is negative"),
    (["5,100", "4,100"], 2, "arrival_time 4 is smaller than the one before"),
    (["5,100", "7"], 2, "expected 2 columns 'arrival_time,size', got 1"),
    (["5,100,3"], 1, "expected 2 columns"),
    (["# servers=2 rates=1.0", "5,100"], 1, "header: servers=2 but 1 rates"),
    (["# servers=two", "5,100"], 1, "header .servers=two.: servers must be an integer"),
    (["1.5,100"], 1, "arrival_time '1.5' is not an integer"),
    (["1,nan"], 1, "size 'nan' is not an integer"),
    (["# just a comment", ""], 1, "no job rows"),
])
def test_malformed_csv_names_the_file_and_line(tmp_path, lines, line, message):
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFileError, match=f"bad.csv:{line}: trace 'bad': {message}") as err:
        read_lb_csv(path)
    assert err.value.line == line and "\n" not in str(err.value)
    with pytest.raises(TraceFileError, match=f"bad.csv:{line}:"):
        load_traces(tmp_path, "csv", "all")  # the same error through the dataset loader
