"""LitData's serializers (``data_format`` names), decoded as ``litdata``'s own deserializers decode them, without
running code (``pickle`` only when allowed), and its pytree ``data_spec`` (dicts, lists and tuples of leaves).

A malformed value raises ``ValueError`` (the reader names the file and leaf).
"""

from __future__ import annotations

import json
import pickle
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

UNSAFE = frozenset({"pickle"})
# litdata's dtype tables, by position (its constants say: don't change the order)
_NUMPY = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16, np.float32,
          np.float64, np.complex64, np.complex128, np.bool_]  # then object, bytes, str, void: never from bytes
_TORCH = ["float32", "float32", "float64", "float64", "complex64", "complex64", "complex128", "complex128",
          "float16", "float16", "bfloat16", "uint8", "int8", "int16", "int16", "int32", "int32", "int64", "int64",
          "bool", "uint16"]


def _numpy_dtype(code: int) -> np.dtype:
    if not 0 <= code < len(_NUMPY):
        raise ValueError(f"numpy dtype code {code} is not one that can be read from bytes")
    return np.dtype(_NUMPY[code])


def _torch_dtype(code: int) -> Any:
    import torch

    if not 0 <= code < len(_TORCH):
        raise ValueError(f"unknown tensor dtype code {code}")
    return getattr(torch, _TORCH[code])


def _tensor_from(data: bytes, dtype: Any, shape: tuple[int, ...] | None = None) -> Any:
    import torch

    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(data) % itemsize:
        raise ValueError(f"{len(data)} bytes are no whole number of {dtype} items")
    flat = torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty((0,), dtype=dtype)
    return flat if shape is None else flat.reshape(shape)  # RuntimeError when the shape does not fit


def _tensor(data: bytes) -> Any:
    if len(data) < 8:
        raise ValueError("shorter than the tensor header")
    code, rank = struct.unpack_from(">II", data, 0)
    if 8 + 4 * rank > len(data):
        raise ValueError(f"a shape of {rank} dimensions runs past the value's {len(data)} bytes")
    shape = struct.unpack_from(f">{rank}I", data, 8)
    return _tensor_from(data[8 + 4 * rank :], _torch_dtype(code), shape)


def _numpy(data: bytes) -> np.ndarray:
    if len(data) < 8:
        raise ValueError("shorter than the array header")
    code, rank = struct.unpack_from("<II", data)
    if 8 + 4 * rank > len(data):
        raise ValueError(f"a shape of {rank} dimensions runs past the value's {len(data)} bytes")
    shape = struct.unpack_from(f"<{rank}I", data, 8)
    values = np.frombuffer(data, _numpy_dtype(code), offset=8 + 4 * rank).copy()
    return values if values.shape == shape else values.reshape(shape)


def _pil(data: bytes) -> Any:
    from torch_drt.formats._mds_encodings import decoder as mds_decoder

    return mds_decoder("pil")(data)  # the same layout as MDS's ``pil``


def _scalar(fmt: str) -> Callable[[bytes], Any]:
    size = struct.calcsize(fmt)

    def decode(data: bytes) -> Any:
        if len(data) != size:
            raise ValueError(f"{len(data)} bytes for a value of {size}")
        return struct.unpack(fmt, data)[0]

    return decode


def _bool(data: bytes) -> bool:
    if len(data) != 1:
        raise ValueError(f"{len(data)} bytes for a bool")
    return data[0] != 0


_DECODERS: dict[str, Callable[[bytes], Any]] = {
    "str": lambda d: bytes(d).decode("utf-8"),
    "text": lambda d: bytes(d).decode("utf-8"),
    "bool": _bool,
    "int": _scalar("<q"),
    "float": _scalar("<d"),
    "bytes": bytes,
    "numpy": _numpy,
    "tensor": _tensor,
    "pil": _pil,
    "pickle": pickle.loads,
}
_FIXED = {"int": 8, "float": 8, "bool": 1}


def fixed_size(name: str) -> int | None:
    """The size of every value of serializer ``name``, or None when values vary."""
    return _FIXED.get(name)


def decoder(name: str) -> Callable[[bytes], Any]:
    """The decoder of a ``data_format`` entry (``int``, ``no_header_numpy:10``, ...).

    Raises:
        ValueError: for a serializer not read here (media decoded by optional libraries, LitData's binary JSON).
    """
    base, _, arg = name.partition(":")
    if base == "no_header_numpy":
        dtype = _numpy_dtype(int(arg))
        return lambda d: np.frombuffer(d, dtype).copy()
    if base == "no_header_tensor":
        tdtype = _torch_dtype(int(arg))
        return lambda d: _tensor_from(d, tdtype)
    found = _DECODERS.get(name)
    if found is None:
        raise ValueError(f"LitData serializer {name!r} is not read by torch_drt (supported: "
                         f"{sorted([*_DECODERS, 'no_header_numpy', 'no_header_tensor'])})")
    return found


_CONTAINERS = {"builtins.dict": dict, "builtins.list": list, "builtins.tuple": tuple,
               "collections.OrderedDict": dict}


def unflattener(spec_text: str | None, leaves: int) -> Callable[[list], Any]:
    """A function building a sample from its ``leaves`` values as the ``data_spec`` (torch pytree JSON) says.

    Raises:
        ValueError: for a spec that is not JSON, not protocol 1, has a container other than dict, list or tuple,
            or does not have ``leaves`` leaves.
    """
    if spec_text is None:
        return lambda values: values[0] if leaves == 1 else values
    protocol, root = json.loads(spec_text)
    if protocol != 1:
        raise ValueError(f"data_spec protocol {protocol!r} is not 1")
    count = [0]

    def build(node: Any) -> Callable[[list], Any]:
        kind, children = node["type"], node["children_spec"]
        if kind is None:
            if children:
                raise ValueError("a leaf with children")
            at = count[0]
            count[0] += 1
            return lambda values: values[at]
        container = _CONTAINERS.get(kind)
        if container is None:
            raise ValueError(f"container {kind!r} is not a dict, list or tuple")
        parts = [build(child) for child in children]
        if container is dict:
            keys = json.loads(node["context"])
            if not isinstance(keys, list) or len(keys) != len(parts):
                raise ValueError("dict keys do not match its children")
            return lambda values: {k: p(values) for k, p in zip(keys, parts)}
        return lambda values: container(p(values) for p in parts)

    make = build(root)
    if count[0] != leaves:
        raise ValueError(f"data_spec has {count[0]} leaves, data_format {leaves}")
    return make
