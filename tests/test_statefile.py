"""The data-only state codec: exact round trips (values, views, identity, RNG streams) and a
one-line refusal for everything that is not data this reader accepts."""

from __future__ import annotations

import io
import json
from collections import OrderedDict, defaultdict, deque
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from plume.runs.statefile import Encoded, StateRefused, class_name, decode, encode, load, save


@dataclass
class _Holder:
    stacked: np.ndarray
    note: str = ""


def _round_trip(value, classes=None):
    buffer = io.BytesIO()
    save({"value": value}, buffer)
    buffer.seek(0)
    return load(buffer)["value"] if not classes else decode(load(buffer)["value"], classes)


DTYPES = st.sampled_from(["<f8", "<f4", "<f2", "<i8", "<i4", "<u2", "|u1", "|b1", "<c16",
                          "<U3"])


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_plain_array_and_its_views_come_back_bit_for_bit(data):
    dtype = np.dtype(data.draw(DTYPES))
    array = data.draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5)))
    view = array.reshape(-1)[::2] if array.ndim else array
    back, back_view = _round_trip([array, view, array])[::2], None
    got, again = back
    assert got.dtype == array.dtype and got.shape == array.shape
    assert got.tobytes() == array.tobytes() and again is got  # one object, reached twice
    back_view = _round_trip([array, view])[1]
    assert back_view.tobytes() == view.tobytes()


def test_views_stay_views_of_the_restored_base():
    stacked = np.arange(12.0).reshape(3, 4)
    first, rows = stacked[0], stacked[1:]
    back_stacked, back_first, back_rows = _round_trip([stacked, first, rows])
    back_first[:] = -1.0
    back_rows[0, 0] = 99.0
    assert back_stacked[0].tolist() == [-1.0] * 4 and back_stacked[1, 0] == 99.0


def test_numbers_scalars_containers_and_rng_streams_are_exact():
    rng = np.random.default_rng(np.random.SeedSequence(7).spawn(3)[2])
    rng.random(5)
    value = {"f": 0.1, "inf": float("-inf"), "big": 2**100, "np": np.float32(1.5),
             "t": (1, "a", None), "d": deque([1, 2], maxlen=3), "od": OrderedDict(a=1),
             "dd": defaultdict(list, {3: [1]}), "s": {1, 2}, "fs": frozenset({"x"}),
             "bytes": b"\x00\xff", "rng": rng, ("tuple", "key"): 1, "dtype": np.dtype("<i2"),
             "type": np.float32, "tensor": torch.arange(4.0)}
    back = _round_trip(value)
    assert back["rng"].random(3).tolist() == rng.random(3).tolist()
    assert back["rng"].bit_generator.seed_seq.spawn_key == (2,)
    assert type(back["np"]) is np.float32 and back["big"] == 2**100
    assert back["d"].maxlen == 3 and back["dd"]["new"] == [] and back[("tuple", "key")] == 1
    for key in ("f", "inf", "t", "od", "s", "fs", "bytes", "dtype", "type"):
        assert back[key] == value[key] and type(back[key]) is type(value[key])
    assert torch.equal(back["tensor"], value["tensor"])


def test_objects_come_back_only_as_the_classes_the_reader_names():
    holder = _Holder(np.zeros(3), "kept")
    encoded = encode({"h": holder, "again": holder})
    back = decode(encoded, {class_name(_Holder): _Holder})
    assert back["h"] is back["again"] and back["h"].note == "kept"
    with pytest.raises(StateRefused, match=r"class '.*_Holder' is not one this job builds"):
        decode(encoded)


@pytest.mark.parametrize("value,message", [
    (lambda: 1, "a builtins.function is not data"),
    (np.array([object()]), "dtype object is not plain data"),
    (defaultdict(lambda: 0), "a defaultdict of .* is not data"),
    (io.BytesIO(), "is not data"),
])
def test_what_is_not_data_is_refused_when_saving(value, message):
    with pytest.raises(TypeError, match=message):
        encode({"x": value})


def _structure(node, tensors=None) -> Encoded:
    return Encoded(json.dumps(node), tensors or {})


RAW = torch.zeros(16, dtype=torch.uint8)
ARRAY = {"t": "array", "id": 0, "tensor": "a", "shape": [2], "dtype": "<f8", "writeable": True}


@pytest.mark.parametrize("node,tensors,message", [
    ({"t": "object", "id": 0, "class": "os.system", "v": {}}, {},
     "class 'os.system' is not one this job builds"),
    ({"t": "type", "v": "builtins.eval"}, {}, "type 'builtins.eval' is not allowed"),
    ({"t": "defaultdict", "id": 0, "factory": "eval", "v": []}, {}, "factory 'eval'"),
    ({"t": "generator", "id": 0, "bits": "Evil", "state": {}, "seed_seq": None}, {},
     "bit generator 'Evil'"),
    ({**ARRAY, "dtype": "|O"}, {"a": RAW}, "dtype '|O' is not plain data"),
    ({**ARRAY, "shape": [3]}, {"a": RAW}, "16 bytes for \\(3,\\)"),
    ({**ARRAY, "tensor": "missing"}, {"a": RAW}, "tensor 'missing' that is not stored"),
    ({"t": "view", "id": 1, "base": ARRAY, "offset": 8, "shape": [2], "strides": [8],
      "dtype": "<f8", "writeable": True}, {"a": RAW}, "outside its base of 16 bytes"),
    ({"t": "ref", "id": 5}, {}, "before it is defined"),
    ({"t": "pickle", "v": "gASV"}, {}, "unknown node kind 'pickle'"),
    ({"t": "static", "key": "traces"}, {}, "refers to 'traces', which this job did not build"),
])
def test_a_structure_that_is_not_accepted_data_is_refused_in_one_line(node, tensors, message):
    with pytest.raises(StateRefused, match=message) as refused:
        decode(_structure(node, tensors))
    assert "\n" not in str(refused.value)


def test_a_deeply_nested_structure_is_refused():
    deep = '{"t":"list","id":0,"v":[' * 100_000 + "]}" * 100_000
    with pytest.raises(StateRefused, match="nested too deeply"):
        decode(Encoded(deep, {}))
