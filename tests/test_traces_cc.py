"""Built-in CC datasets: the Aurora link tuples (ranges, spacing, splits) and the time-varying
Genet-style links (kinds, skew, conventions); both fixed by the dataset seed."""

from __future__ import annotations

import numpy as np
import pytest

from plume.traces.cc import (
    AURORA_RANGES,
    CC_DATASETS,
    DATASET_SEED,
    SERIES_KINDS,
    UNITS,
    aurora_levels,
    generate_cc_dataset,
    load_cc_dataset,
)
from plume.traces.loaders import load_traces

PARAMS = ("bandwidth", "latency", "queue", "loss")


@pytest.mark.parametrize("split, size, levels", [("train", 1000, 10), ("test", 300, 12)])
def test_aurora_tuples_cover_the_paper_ranges_on_distinct_grid_points(split, size, levels):
    traces = load_cc_dataset("aurora", split)
    assert len(traces) == size and not traces.series and traces.labels is None
    assert sorted(traces.constants) == sorted(PARAMS)
    ranges = AURORA_RANGES[split]
    for name in PARAMS:
        values = traces.constants[name]
        low, high = getattr(ranges, name)
        assert values.min() == pytest.approx(low) and values.max() == pytest.approx(high)
        assert len(np.unique(values)) == levels  # every level is used
    tuples = np.stack([traces.constants[p] for p in PARAMS], axis=1)
    assert len(np.unique(tuples, axis=0)) == size  # drawn without replacement
    assert traces.meta["units"] == {p: UNITS[p] for p in PARAMS}
    assert traces.trace_ids[0] == f"aurora/{split}/0000"


def test_aurora_spacing_is_geometric_except_latency_and_the_zero_loss_level():
    for split, (bw_low, bw_high) in [("train", (100, 500)), ("test", (50, 1000))]:
        levels = aurora_levels(split)
        n = len(levels["bandwidth"])
        ratios = levels["bandwidth"][1:] / levels["bandwidth"][:-1]
        np.testing.assert_allclose(ratios, (bw_high / bw_low) ** (1 / (n - 1)))
        np.testing.assert_allclose(np.diff(levels["latency"]), np.diff(levels["latency"])[0])
        loss = levels["loss"]
        assert loss[0] == 0.0 and loss[1] == pytest.approx(0.001)
        np.testing.assert_allclose(loss[2:] / loss[1:-1], loss[2] / loss[1])
        queue = levels["queue"]
        assert np.all(queue == np.round(queue)) and np.all(np.diff(queue) > 0)
        geometric = np.geomspace(queue[0], queue[-1], n)
        assert np.all(np.abs(queue - geometric) <= 0.5)
    assert list(aurora_levels("train")["queue"]) == [2, 3, 4, 6, 8, 12, 17, 24, 35, 50]


def test_datasets_are_fixed_by_their_own_seed_and_splits_are_independent():
    for name in CC_DATASETS:
        train = generate_cc_dataset(name, "train")
        assert train.content_hash == generate_cc_dataset(name, "train", DATASET_SEED).content_hash
        assert load_cc_dataset(name, "train") is load_cc_dataset(name, "train")  # memoised
        assert load_cc_dataset(name, "train").content_hash == train.content_hash
        other = generate_cc_dataset(name, "train", seed=DATASET_SEED + 1)
        assert other.content_hash != train.content_hash
        test = generate_cc_dataset(name, "test")
        assert test.content_hash != train.content_hash
        assert train.meta["split"] == "train" and train.meta["seed"] == DATASET_SEED
    # The test split reaches beyond the training ranges.
    train, test = (load_cc_dataset("aurora", s) for s in ("train", "test"))
    assert test.constants["bandwidth"].max() > train.constants["bandwidth"].max()


def test_cc_series_kinds_are_skewed_in_train_balanced_in_test_and_behave_as_labelled():
    train = load_cc_dataset("cc_series", "train")
    counts = {k: int((train.labels == k).sum()) for k in SERIES_KINDS}
    assert counts == {"stable": 600, "step": 250, "volatile": 100, "outage": 50}
    test = load_cc_dataset("cc_series", "test")
    assert {k: int((test.labels == k).sum()) for k in SERIES_KINDS} == dict.fromkeys(
        SERIES_KINDS, 75)
    np.testing.assert_allclose(train.time[:, 1] - train.time[:, 0], 0.5)
    assert np.all(train.lengths == 120) and np.all(train.constants["period"] == 60.0)
    bw = train.bandwidth
    assert bw.min() >= 1.0
    cv = bw.std(axis=1) / bw.mean(axis=1)
    changes = (np.abs(np.diff(bw, axis=1)) > 1e-9).sum(axis=1)
    drop = bw.min(axis=1) / np.median(bw, axis=1)
    kind = {k: train.labels == k for k in SERIES_KINDS}
    assert cv[kind["stable"]].max() < 0.1
    assert changes[kind["step"]].max() <= 12  # a new level every 5-15 s over 60 s
    assert cv[kind["volatile"]].min() > 0.2
    np.testing.assert_allclose(drop[kind["outage"]], 0.05)
    c = train.constants
    assert 0.05 <= c["latency"].min() and c["latency"].max() <= 0.3
    assert 2 <= c["queue"].min() and c["queue"].max() <= 50
    assert c["loss"].max() <= 0.02 and 0.2 < np.mean(c["loss"] == 0) < 0.4  # Genet's draw


def test_a_saved_dataset_reads_back_through_the_npz_loader(tmp_path):
    traces = load_cc_dataset("aurora", "test")
    path = traces.save(tmp_path / "aurora_test.npz")
    loaded = load_traces(path, "npz", "all")
    assert loaded.content_hash == traces.content_hash


def test_bad_names_and_seeds_raise():
    with pytest.raises(ValueError, match="unknown CC dataset 'nope'"):
        load_cc_dataset("nope", "train")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        generate_cc_dataset("aurora", "dev")
    with pytest.raises(ValueError, match="non-negative"):
        generate_cc_dataset("aurora", "train", seed=-1)
    with pytest.raises(TypeError, match="must be an int"):
        generate_cc_dataset("aurora", "train", seed=1.5)
