"""MosaicML Streaming's MDS column encodings, decoded without executing code (``pkl`` only when allowed).

Each decoder takes the column's bytes and returns what ``streaming``'s own ``mds_decode`` returns; a malformed
value raises ``ValueError`` (the reader names the file and column), and no size read from the data makes it ask
for more memory than the data could fill.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from io import BytesIO
from typing import Any

import numpy as np

UNSAFE = frozenset({"pkl"})
_SCALARS = {name: np.dtype(name) for name in (
    "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16", "float32", "float64")}
_VALUE_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32", 33: "int32",
                 34: "float32", 64: "uint64", 65: "int64", 66: "float64"}
_SHAPE_DTYPES = {0: "uint8", 1: "uint16", 2: "uint32", 3: "uint64"}


def _ndarray_spec(encoding: str) -> tuple[str | None, tuple[int, ...] | None]:
    args = encoding.split(":")[1:]
    if len(args) > 2:
        raise ValueError(f"encoding {encoding!r} has more than a dtype and a shape")
    dtype = args[0] if args else None
    if dtype is not None and dtype not in _VALUE_DTYPES.values():
        raise ValueError(f"encoding {encoding!r}: unsupported dtype {dtype!r}")
    shape = tuple(int(d) for d in args[1].split(",")) if len(args) == 2 else None
    if shape is not None and any(d < 1 for d in shape):
        raise ValueError(f"encoding {encoding!r}: dimensions must be >= 1")
    return dtype, shape


def fixed_size(encoding: str) -> int | None:
    """The size in bytes of every value of ``encoding``, or None when values vary."""
    if encoding == "int":
        return 8
    if encoding in _SCALARS:
        return _SCALARS[encoding].itemsize
    if encoding.startswith("ndarray:"):
        dtype, shape = _ndarray_spec(encoding)
        if dtype is not None and shape is not None:
            return int(np.prod(shape)) * np.dtype(dtype).itemsize
    return None


def _ndarray(encoding: str) -> Callable[[bytes], np.ndarray]:
    fixed_dtype, fixed_shape = _ndarray_spec(encoding)

    def decode(data: bytes) -> np.ndarray:
        i = 0
        if fixed_dtype is None:
            dtype = _VALUE_DTYPES.get(data[i]) if len(data) > i else None
            if dtype is None:
                raise ValueError("unknown or missing dtype byte")
            i += 1
        else:
            dtype = fixed_dtype
        if fixed_shape is None:
            if len(data) <= i:
                raise ValueError("missing shape byte")
            ndim, shape_dtype = data[i] >> 2, _SHAPE_DTYPES[data[i] % 4]
            i += 1
            size = ndim * np.dtype(shape_dtype).itemsize
            if len(data) < i + size:
                raise ValueError(f"shape of {ndim} dimensions runs past the value's {len(data)} bytes")
            shape = tuple(int(d) for d in np.frombuffer(data, shape_dtype, ndim, i))
            i += size
        else:
            shape = fixed_shape
        values = np.frombuffer(data, dtype, offset=i)  # ValueError unless the rest is whole items
        return values.reshape(shape).copy()  # ValueError when the shape does not fit the values

    return decode


def _scalar(dtype: np.dtype) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        if len(data) != dtype.itemsize:
            raise ValueError(f"{len(data)} bytes for a {dtype} value")
        return np.frombuffer(data, dtype)[0]

    return decode


def _int(data: bytes) -> int:
    if len(data) != 8:
        raise ValueError(f"{len(data)} bytes for an int64 value")
    return int.from_bytes(data, "little", signed=True)


def _pil(data: bytes) -> Any:
    from PIL import Image

    if len(data) < 12:
        raise ValueError("shorter than the PIL header")
    width, height, mode_size = (int(v) for v in np.frombuffer(data, np.uint32, 3))
    raw = data[12 + mode_size :]
    if 12 + mode_size > len(data) or width * height > 8 * len(raw):  # every mode needs a bit per pixel at least
        raise ValueError(f"PIL header of {width}x{height} pixels does not fit the value's {len(data)} bytes")
    return Image.frombytes(data[12 : 12 + mode_size].decode("utf-8"), (width, height), raw)


def _image(data: bytes) -> Any:
    """A PIL image, decoded now (``streaming`` opens it lazily): damaged pixels fail here, named, not later."""
    from PIL import Image

    image = Image.open(BytesIO(data))
    image.load()
    return image


def _sized_list(data: bytes, offset: int) -> list[bytes]:
    """``[count: u32][sizes: count * u32][items]`` read from ``offset``, every size checked against the data."""
    if len(data) < offset + 4:
        raise ValueError("shorter than its count")
    count = int(np.frombuffer(data, np.uint32, 1, offset)[0])
    start = offset + 4 + 4 * count
    if start > len(data):
        raise ValueError(f"{count} items do not fit the value's {len(data)} bytes")
    sizes = np.frombuffer(data, np.uint32, count, offset + 4).astype(np.int64)
    ends = start + np.cumsum(sizes)
    if count and ends[-1] > len(data):
        raise ValueError(f"items of {int(sizes.sum())} bytes run past the value's {len(data)} bytes")
    starts = np.concatenate([[start], ends[:-1]]).astype(np.int64)
    return [data[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


def _list_of(item: Callable[[bytes], Any]) -> Callable[[bytes], list]:
    return lambda data: [item(x) for x in _sized_list(data, 4)]  # 4 bytes reserved, then the list


def _jpeg_array(data: bytes) -> list:
    items = _sized_list(data, 0)
    if not items:
        raise ValueError("an empty jpeg array")
    return [_image(x) for x in items]


def _decimal(data: bytes) -> Decimal:
    try:
        return Decimal(data.decode("utf-8"))
    except InvalidOperation:
        raise ValueError("not a decimal") from None


_DECODERS: dict[str, Callable[[bytes], Any]] = {
    "bytes": bytes,
    "str": lambda d: d.decode("utf-8"),
    "int": _int,
    "str_int": lambda d: int(d.decode("utf-8")),
    "str_float": lambda d: float(d.decode("utf-8")),
    "str_decimal": _decimal,
    "pil": _pil,
    "jpeg": _image,
    "png": _image,
    "jpeg_array": _jpeg_array,
    "jpegarray": _jpeg_array,
    "list[pil]": _list_of(_pil),
    "list[jpeg]": _list_of(_image),
    "list[png]": _list_of(_image),
    "json": lambda d: json.loads(d.decode("utf-8")),
    "pkl": pickle.loads,
    **{name: _scalar(dtype) for name, dtype in _SCALARS.items()},
}


def decoder(encoding: str, decode_images: bool = True) -> Callable[[bytes], Any]:
    """The decoder of an MDS column ``encoding``; with ``decode_images=False`` image columns stay bytes.

    Raises:
        ValueError: for an unknown encoding.
    """
    if encoding == "ndarray" or encoding.startswith("ndarray:"):
        return _ndarray(encoding)
    if not decode_images and encoding in ("pil", "jpeg", "png"):
        return bytes
    found = _DECODERS.get(encoding)
    if found is None:
        raise ValueError(f"unknown MDS encoding {encoding!r}")
    return found
