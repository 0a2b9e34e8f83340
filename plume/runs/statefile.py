"""Data-only state files: a checkpoint is read without ever running code from it.

A value (a checkpoint, a snapshot of live training objects) is split into a **JSON
structure** and a flat table of **tensors**, written with ``torch.save`` and read back with
``torch.load(weights_only=True)``: torch's own allow-list admits tensors, strings, numbers and
plain containers, nothing that names a function. numpy arrays travel as the raw bytes of a
uint8 tensor with their dtype, shape and strides in the structure, so every value comes back
bit for bit, and views come back as views of the same restored array (simulators keep their
state in stacked arrays with named row views; independent copies would silently stop
updating half of it). Object identity is kept: a value reached twice is stored once.

Objects (an environment, a sampler) are stored as their class name and attributes, and are
rebuilt only for classes the *reader* names (``classes``): a restarted job names the classes
of the objects it has just built itself, so a file can only fill in attributes of the kinds
of objects the job would make anyway; ``__init__``, ``__setstate__`` and ``__reduce__`` are
never called, and no module is imported because a file names it. Static data shared with the
restarted job (its TraceSet and derived tables) is stored as a key and bound to the reader's
objects (``static``). Anything else is refused with :class:`StateRefused`, one line.
"""

from __future__ import annotations

import base64
import enum
import functools
import json
import math
import sys
import types
from collections import OrderedDict, defaultdict, deque
from dataclasses import dataclass
from typing import Any
from collections.abc import Hashable, Mapping

import numpy as np

FORMAT = "plume-state/1"
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")
_ARRAY_KINDS = "biufcmMSU"  # numbers, times, fixed-width strings: never objects or records
_FACTORIES = {"list": list, "dict": dict, "int": int, "float": float, "set": set}
_TYPES = {f"builtins.{t.__name__}": t for t in (bool, int, float, complex, str)} | {
    f"numpy.{t.__name__}": t for t in (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                       np.uint8, np.uint16, np.uint32, np.uint64, np.float16,
                                       np.float32, np.float64, np.complex64, np.complex128)}
_TYPE_NAMES = {t: name for name, t in _TYPES.items()}
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement
CODE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
         functools.partial)


class StateRefused(ValueError):
    """A state file or structure that is not data this reader accepts (one line)."""


@dataclass(frozen=True)
class Encoded:
    """A value as data: its JSON structure and the tensors the structure names."""

    structure: str
    tensors: dict[str, Any]


def class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def encode(value: Any, static: Mapping[int, Hashable] | None = None) -> Encoded:
    """``value`` as data; ``static`` maps ``id(obj)`` to the key under which the reader will
    supply ``obj`` itself. Raises TypeError naming the path of anything that is not data."""
    encoder = _Encoder(static or {})
    structure = encoder.node(value, "value")
    return Encoded(json.dumps(structure, allow_nan=False, separators=(",", ":")),
                   encoder.tensors)


def decode(encoded: Encoded, classes: Mapping[str, type] | None = None,
           static: Mapping[Hashable, Any] | None = None) -> Any:
    """The value of :func:`encode`; objects only of ``classes`` (name -> class, see
    :func:`class_name`), static keys bound to ``static``. StateRefused otherwise."""
    if not isinstance(encoded, Encoded) or not isinstance(encoded.structure, str):
        raise StateRefused(f"expected an encoded state, got {type(encoded).__name__}")
    try:
        structure = json.loads(encoded.structure)
        return _Decoder(encoded.tensors, classes or {}, static or {}).node(structure)
    except RecursionError:
        raise StateRefused("the structure is nested too deeply") from None
    except (json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError, AttributeError,
            OverflowError) as err:
        if isinstance(err, StateRefused):
            raise
        raise StateRefused(f"malformed structure ({type(err).__name__}: {err})") from None


def save(value: Any, file) -> None:
    """Write ``value`` (plain data, tensors, arrays, :class:`Encoded` parts) to ``file``."""
    import torch

    encoded = encode(value)
    torch.save({"format": FORMAT, "structure": encoded.structure, "tensors": encoded.tensors},
               file)


def load(file) -> Any:
    """The value :func:`save` wrote. Objects are refused here; :class:`Encoded` parts come
    back encoded, for a reader that knows their classes. StateRefused for anything else."""
    import torch

    try:
        payload = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 (torn zip, truncated file, a pickle: refused)
        detail = str(err).strip().splitlines()[0] if str(err).strip() else "no detail"
        raise StateRefused(f"not a data-only state file ({type(err).__name__}: "
                           f"{detail[:200]})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise StateRefused(f"not a {FORMAT} file (written by an older Plume?)")
    tensors = payload.get("tensors")
    if not isinstance(tensors, dict) or not all(
            isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in tensors.items()):
        raise StateRefused("its tensor table is not a mapping of names to tensors")
    return decode(Encoded(payload.get("structure"), tensors))


class _Encoder:
    """Walks a value depth first, giving every mutable object a node id on first sight."""

    def __init__(self, static: Mapping[int, Hashable]) -> None:
        self.static = static
        self.tensors: dict[str, Any] = {}
        self.seen: dict[int, tuple[int, Any]] = {}  # id -> (node id, the object: kept alive)

    def node(self, value: Any, path: str) -> Any:
        kind = type(value)
        if value is None or kind in (bool, int, str):
            return value
        if kind is float:
            return value if math.isfinite(value) else {"t": "float", "v": repr(value)}
        if id(value) in self.static:
            return {"t": "static", "key": self.node(self.static[id(value)], f"{path}<key>")}
        if id(value) in self.seen:
            return {"t": "ref", "id": self.seen[id(value)][0]}
        return self._new(value, path)

    def _remember(self, value: Any) -> int:
        number = len(self.seen)
        self.seen[id(value)] = (number, value)
        return number

    def _items(self, values, path: str) -> list:
        return [self.node(v, f"{path}[{i}]") for i, v in enumerate(values)]

    def _pairs(self, mapping, path: str) -> list:
        return [[self.node(k, f"{path}<key>"), self.node(v, f"{path}[{k!r}]")]
                for k, v in mapping.items()]

    def _new(self, value: Any, path: str) -> dict[str, Any]:
        kind = type(value)
        if kind is bytes:
            return {"t": "bytes", "v": base64.b64encode(value).decode()}
        if isinstance(value, Encoded):
            number = self._remember(value)
            self.tensors.update({f"e{number}.{k}": t for k, t in value.tensors.items()})
            return {"t": "encoded", "id": number, "structure": value.structure,
                    "names": sorted(value.tensors)}
        if isinstance(value, np.ndarray):
            return self._array(value, path)
        if isinstance(value, np.generic):
            return {"t": "scalar", "dtype": _dtype_text(value.dtype, path),
                    "v": base64.b64encode(value.tobytes()).decode()}
        if isinstance(value, np.dtype):
            return {"t": "dtype", "v": _dtype_text(value, path)}
        if _is_tensor(value):
            return self._tensor(value)
        if isinstance(value, (np.random.Generator, np.random.SeedSequence)):
            return self._random(value, path)
        if kind in (list, tuple, set, frozenset, deque):
            number = self._remember(value)
            node = {"t": kind.__name__, "id": number, "v": self._items(value, path)}
            return node | ({"maxlen": value.maxlen} if kind is deque else {})
        if kind in (dict, OrderedDict, defaultdict):
            return self._mapping(value, path)
        return self._instance(value, path)

    def _mapping(self, value: dict, path: str) -> dict[str, Any]:
        node = {"t": type(value).__name__, "id": self._remember(value)}
        if type(value) is defaultdict:
            factory = value.default_factory
            if factory is not None and _FACTORIES.get(getattr(factory, "__name__", "")) \
                    is not factory:
                raise TypeError(f"{path}: a defaultdict of {factory!r} is not data")
            node["factory"] = None if factory is None else factory.__name__
        return node | {"v": self._pairs(value, path)}

    def _instance(self, value: Any, path: str) -> dict[str, Any]:
        kind = type(value)
        if isinstance(value, type):
            if value not in _TYPE_NAMES:
                raise TypeError(f"{path}: the class {class_name(value)} is not data")
            return {"t": "type", "v": _TYPE_NAMES[value]}
        if isinstance(value, enum.Enum):
            return {"t": "enum", "class": class_name(kind), "v": value.name}
        if isinstance(value, tuple) and hasattr(kind, "_fields"):
            return {"t": "namedtuple", "class": class_name(kind), "id": self._remember(value),
                    "v": self._items(value, path)}
        if isinstance(value, CODE) or not hasattr(value, "__dict__") or not (
                kind.__flags__ & _HEAP_TYPE):  # a C type keeps its state outside __dict__
            raise TypeError(f"{path}: a {class_name(kind)} is not data")
        number = self._remember(value)
        state = {k: self.node(v, f"{path}.{k}") for k, v in vars(value).items()}
        return {"t": "object", "class": class_name(kind), "id": number, "v": state}

    def _array(self, array: np.ndarray, path: str) -> dict[str, Any]:
        if type(array) is not np.ndarray:
            raise TypeError(f"{path}: a {class_name(type(array))} is not a plain ndarray")
        dtype = _dtype_text(array.dtype, path)
        root = _owner(array)
        if root is array or not root.flags.c_contiguous:
            number = self._remember(array)
            name = f"a{number}"
            import torch

            # a copy: the array's memory may also back a tensor of another dtype, which
            # torch.save refuses to store twice
            raw = np.array(array, order="C").reshape(-1).view(np.uint8)
            self.tensors[name] = torch.from_numpy(raw)
            return {"t": "array", "id": number, "tensor": name, "shape": list(array.shape),
                    "dtype": dtype, "writeable": bool(array.flags.writeable)}
        base = self.node(root, f"{path}<base>")
        offset = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        return {"t": "view", "id": self._remember(array), "base": base, "offset": offset,
                "shape": list(array.shape), "strides": list(array.strides), "dtype": dtype,
                "writeable": bool(array.flags.writeable)}

    def _tensor(self, tensor) -> dict[str, Any]:
        import torch

        number = self._remember(tensor)
        name = f"t{number}"
        self.tensors[name] = tensor.detach()
        parameter = isinstance(tensor, torch.nn.Parameter)
        return {"t": "parameter" if parameter else "tensor", "id": number, "tensor": name,
                "requires_grad": bool(tensor.requires_grad)}

    def _random(self, value, path: str) -> dict[str, Any]:
        number = self._remember(value)
        if isinstance(value, np.random.SeedSequence):
            return {"t": "seedseq", "id": number,
                    "entropy": self.node(value.entropy, path),
                    "spawn_key": list(value.spawn_key), "pool_size": value.pool_size,
                    "n_children_spawned": value.n_children_spawned}
        bits = value.bit_generator
        if type(bits).__name__ not in _BIT_GENERATORS:
            raise TypeError(f"{path}: bit generator {type(bits).__name__} is not supported")
        return {"t": "generator", "id": number, "bits": type(bits).__name__,
                "state": self.node(bits.state, f"{path}.state"),
                "seed_seq": self.node(bits.seed_seq, f"{path}.seed_seq")}


def _is_tensor(value: Any) -> bool:
    """A torch tensor (torch need not be imported for a state without any)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _owner(array: np.ndarray) -> np.ndarray:
    """The last ndarray in ``array``'s chain of bases."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _dtype_text(dtype: np.dtype, path: str) -> str:
    if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None:
        raise TypeError(f"{path}: dtype {dtype} is not plain data")
    return dtype.str


def _dtype(text: Any) -> np.dtype:
    """A plain dtype from its ``dtype.str``; never an object or record dtype."""
    if not isinstance(text, str) or len(text) > 16:
        raise StateRefused(f"bad dtype {text!r}")
    dtype = np.dtype(text)
    if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None or dtype.str != text:
        raise StateRefused(f"dtype {text!r} is not plain data")
    return dtype


def _shape(values: Any) -> tuple[int, ...]:
    if not isinstance(values, list) or len(values) > 32 or not all(
            type(v) is int and v >= 0 for v in values):
        raise StateRefused(f"bad shape {values!r}")
    return tuple(values)


class _Decoder:
    """Rebuilds the value of a structure; every check names what it refused."""

    def __init__(self, tensors: Mapping[str, Any], classes: Mapping[str, type],
                 static: Mapping[Hashable, Any]) -> None:
        self.tensors, self.classes, self.static = tensors, classes, static
        self.seen: dict[int, Any] = {}

    def node(self, node: Any) -> Any:
        if node is None or type(node) in (bool, int, float, str):
            return node
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise StateRefused(f"unexpected node {str(node)[:80]!r}")
        build = getattr(self, f"_{node['t']}", None)
        if build is None:
            raise StateRefused(f"unknown node kind {node['t'][:40]!r}")
        return build(node)

    def _remember(self, node: dict, value: Any) -> Any:
        number = node["id"]
        if type(number) is not int or number in self.seen:
            raise StateRefused(f"bad or repeated node id {number!r}")
        self.seen[number] = value
        return value

    def _ref(self, node: dict) -> Any:
        if node["id"] not in self.seen:
            raise StateRefused(f"reference to node {node['id']!r} before it is defined")
        return self.seen[node["id"]]

    def _float(self, node: dict) -> float:
        if node["v"] not in ("nan", "inf", "-inf"):
            raise StateRefused(f"bad float {node['v']!r}")
        return float(node["v"])

    def _static(self, node: dict) -> Any:
        key = self.node(node["key"])
        try:
            return self.static[key]
        except (KeyError, TypeError):
            raise StateRefused(f"it refers to {key!r}, which this job did not build") from None

    def _bytes(self, node: dict) -> bytes:
        return base64.b64decode(node["v"], validate=True)

    def _encoded(self, node: dict) -> Encoded:
        prefix = f"e{node['id']}."
        return self._remember(node, Encoded(
            node["structure"], {n: self._tensor_named(prefix + n) for n in node["names"]}))

    def _list(self, node: dict) -> list:
        out = self._remember(node, [])
        out.extend(self.node(v) for v in node["v"])
        return out

    def _tuple(self, node: dict) -> tuple:
        return self._remember(node, tuple(self.node(v) for v in node["v"]))

    def _set(self, node: dict) -> set:
        out = self._remember(node, set())
        out.update(self.node(v) for v in node["v"])
        return out

    def _frozenset(self, node: dict) -> frozenset:
        return self._remember(node, frozenset(self.node(v) for v in node["v"]))

    def _deque(self, node: dict) -> deque:
        maxlen = node.get("maxlen")
        if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
            raise StateRefused(f"bad deque length {maxlen!r}")
        out = self._remember(node, deque(maxlen=maxlen))
        out.extend(self.node(v) for v in node["v"])
        return out

    def _fill(self, out: dict, node: dict) -> dict:
        for key, value in node["v"]:
            out[self.node(key)] = self.node(value)
        return out

    def _dict(self, node: dict) -> dict:
        return self._fill(self._remember(node, {}), node)

    def _OrderedDict(self, node: dict) -> OrderedDict:
        return self._fill(self._remember(node, OrderedDict()), node)

    def _defaultdict(self, node: dict) -> defaultdict:
        factory = node["factory"]
        if factory is not None and factory not in _FACTORIES:
            raise StateRefused(f"defaultdict factory {factory!r} is not allowed")
        return self._fill(self._remember(node, defaultdict(_FACTORIES.get(factory))), node)

    def _scalar(self, node: dict) -> np.generic:
        data = np.frombuffer(base64.b64decode(node["v"], validate=True), dtype=np.uint8)
        dtype = _dtype(node["dtype"])
        if data.size != dtype.itemsize:
            raise StateRefused(f"a {dtype} scalar of {data.size} bytes")
        return data.view(dtype)[0]

    def _dtype(self, node: dict) -> np.dtype:
        return _dtype(node["v"])

    def _type(self, node: dict) -> type:
        if node["v"] not in _TYPES:
            raise StateRefused(f"type {str(node['v'])[:80]!r} is not allowed")
        return _TYPES[node["v"]]

    def _class(self, node: dict, base: type = object) -> type:
        name = node["class"]
        cls = self.classes.get(name) if isinstance(name, str) else None
        if cls is None or not issubclass(cls, base):
            raise StateRefused(f"class {str(name)[:120]!r} is not one this job builds")
        return cls

    def _enum(self, node: dict) -> enum.Enum:
        return self._class(node, enum.Enum)[node["v"]]

    def _namedtuple(self, node: dict) -> tuple:
        cls = self._class(node, tuple)
        return self._remember(node, cls._make(self.node(v) for v in node["v"]))

    def _object(self, node: dict) -> Any:
        cls = self._class(node)
        if not isinstance(node["v"], dict):
            raise StateRefused(f"the attributes of a {node['class']} are not a mapping")
        obj = self._remember(node, cls.__new__(cls))
        obj.__dict__.update({str(k): self.node(v) for k, v in node["v"].items()})
        return obj

    def _tensor_named(self, name: Any):
        tensor = self.tensors.get(name) if isinstance(name, str) else None
        if tensor is None:
            raise StateRefused(f"it names a tensor {str(name)[:40]!r} that is not stored")
        return tensor

    def _tensor(self, node: dict):
        tensor = self._tensor_named(node["tensor"])
        return self._remember(node, tensor.requires_grad_(bool(node["requires_grad"]))
                              if tensor.is_floating_point() else tensor)

    def _parameter(self, node: dict):
        import torch

        tensor = self._tensor_named(node["tensor"])
        return self._remember(node, torch.nn.Parameter(
            tensor, requires_grad=bool(node["requires_grad"])))

    def _array(self, node: dict) -> np.ndarray:
        import torch

        tensor = self._tensor_named(node["tensor"])
        dtype, shape = _dtype(node["dtype"]), _shape(node["shape"])
        if tensor.dtype != torch.uint8 or tensor.dim() != 1 or not tensor.is_contiguous():
            raise StateRefused(f"array {node['tensor']!r} is not stored as raw bytes")
        array = np.empty(shape, dtype)
        raw = tensor.numpy()
        if raw.size != array.nbytes:
            raise StateRefused(f"array {node['tensor']!r}: {raw.size} bytes for {shape} "
                               f"{dtype}")
        array.reshape(-1).view(np.uint8)[:] = raw
        array.flags.writeable = bool(node["writeable"])
        return self._remember(node, array)

    def _view(self, node: dict) -> np.ndarray:
        base = self.node(node["base"])
        dtype, shape = _dtype(node["dtype"]), _shape(node["shape"])
        strides, offset = node["strides"], node["offset"]
        if not isinstance(base, np.ndarray) or base.base is not None:
            raise StateRefused("a view of something that is not a stored array")
        if not (isinstance(strides, list) and len(strides) == len(shape)
                and all(type(s) is int for s in strides) and type(offset) is int):
            raise StateRefused(f"bad strides {strides!r} or offset {offset!r}")
        _check_bounds(base.nbytes, offset, shape, strides, dtype.itemsize)
        view = np.ndarray(shape, dtype=dtype, buffer=base, offset=offset, strides=strides)
        if not node["writeable"]:
            view.flags.writeable = False
        return self._remember(node, view)

    def _seedseq(self, node: dict) -> np.random.SeedSequence:
        entropy = self.node(node["entropy"])
        return self._remember(node, np.random.SeedSequence(
            entropy, spawn_key=tuple(node["spawn_key"]), pool_size=node["pool_size"],
            n_children_spawned=node["n_children_spawned"]))

    def _generator(self, node: dict) -> np.random.Generator:
        if node["bits"] not in _BIT_GENERATORS:
            raise StateRefused(f"bit generator {str(node['bits'])[:40]!r} is not allowed")
        seed_seq = self.node(node["seed_seq"])
        if not isinstance(seed_seq, np.random.SeedSequence):
            raise StateRefused("a generator without its seed sequence")
        bits = getattr(np.random, node["bits"])(seed_seq)
        bits.state = self.node(node["state"])
        return self._remember(node, np.random.Generator(bits))


def _check_bounds(nbytes: int, offset: int, shape, strides, itemsize: int) -> None:
    """A view must lie inside its base array's bytes."""
    if 0 in shape:
        low = high = offset
    else:
        low = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        high = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + itemsize
    if low < 0 or high > nbytes:
        raise StateRefused(f"a view [{low}, {high}) outside its base of {nbytes} bytes")
