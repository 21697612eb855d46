"""The payload of a converted sample: the fields a cache cannot keep as metadata columns, in one self-describing,
code-free binary form (``torch-drt convert`` writes it; ``decode_fields`` reads it back).

The form keeps every type the readers of ``torch_drt.formats`` return, exactly: ``None``, ``bool``, ``int``,
``float``, ``str``, ``bytes``, ``Decimal``, ``datetime``/``date``/``time``, numpy arrays and scalars (dtype and
shape), torch tensors (dtype and shape), PIL images (mode, size, pixels, palette) and lists, tuples, sets and dicts
of them. A value is a tag byte and its body; every length is a little-endian uint64 checked against the bytes
left, so damaged bytes are a ``ValueError`` naming what is wrong, never a crash or an allocation larger than the
data.
"""

from __future__ import annotations

import datetime
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np

MAGIC = b"TDRTF1\x00\x00"
_MAX_DEPTH = 64
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")
_TEXT: dict[bytes, Callable[[str], Any]] = {
    b"s": str, b"D": Decimal, b"z": datetime.datetime.fromisoformat, b"y": datetime.date.fromisoformat,
    b"h": datetime.time.fromisoformat,
}
_DTYPE = re.compile(r"[<>|=][biufc][0-9]{1,2}")
_SEQUENCES = {b"l": list, b"u": tuple, b"S": set, b"Z": frozenset}
_IMAGE_MODES = frozenset({"1", "L", "LA", "P", "PA", "RGB", "RGBA", "RGBX", "CMYK", "YCbCr", "LAB", "HSV", "I", "F",
                          "I;16", "I;16B", "I;16L", "La", "RGBa"})
_TORCH_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                 "bfloat16", "float32", "float64", "complex64", "complex128")


def _blob(out: bytearray, data: bytes | memoryview) -> None:
    out += _U64.pack(len(data))
    out += data


def _text(out: bytearray, tag: bytes, text: str) -> None:
    out += tag
    _blob(out, text.encode())


def _encode(value: Any, out: bytearray, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError(f"values nest deeper than {_MAX_DEPTH} levels")
    if value is None:
        out += b"N"
    elif isinstance(value, np.ndarray | np.generic):  # before float: np.float64 is a float
        array = np.asarray(value)
        if array.dtype.kind not in "biufc" or array.dtype.fields is not None:
            raise ValueError(f"a numpy array of dtype {array.dtype} has no code-free form")
        out += b"a" if isinstance(value, np.ndarray) else b"g"
        _text(out, b"", array.dtype.str)
        _blob(out, np.asarray(array.shape, dtype="<u8").tobytes())
        _blob(out, np.ascontiguousarray(array).tobytes())
    elif isinstance(value, bool):
        out += b"T" if value else b"F"
    elif isinstance(value, int):
        _text(out, b"i", str(value))
    elif isinstance(value, float):
        out += b"f" + _F64.pack(value)
    elif isinstance(value, str):
        _text(out, b"s", value)
    elif isinstance(value, bytes | bytearray | memoryview):
        out += b"b"
        _blob(out, memoryview(value).cast("B"))
    elif isinstance(value, Decimal):
        _text(out, b"D", str(value))
    elif isinstance(value, datetime.datetime | datetime.date | datetime.time):
        tag = b"z" if isinstance(value, datetime.datetime) else b"y" if isinstance(value, datetime.date) else b"h"
        _text(out, tag, value.isoformat())
    elif type(value).__module__ == "torch":
        dtype = str(value.dtype).removeprefix("torch.")
        if dtype not in _TORCH_DTYPES:
            raise ValueError(f"a tensor of dtype {value.dtype} has no code-free form")
        flat = value.detach().cpu().contiguous().reshape(-1)
        _text(out, b"t", dtype)
        _blob(out, np.asarray(value.shape, dtype="<u8").tobytes())
        _blob(out, flat.view(_byte_dtype()).numpy().tobytes() if flat.numel() else b"")
    elif type(value).__module__.startswith("PIL."):
        if value.mode not in _IMAGE_MODES:
            raise ValueError(f"a PIL image of mode {value.mode!r} has no code-free form")
        _text(out, b"I", value.mode)
        out += _U64.pack(value.size[0]) + _U64.pack(value.size[1])
        palette = value.palette.mode if value.mode in ("P", "PA") and value.palette is not None else ""
        _text(out, b"", palette)
        _blob(out, bytes(value.getpalette(palette) or b"") if palette else b"")
        _blob(out, value.tobytes())
    elif isinstance(value, list | tuple | set | frozenset):
        tag = b"l" if isinstance(value, list) else b"u" if isinstance(value, tuple) else b"S"
        out += (b"Z" if isinstance(value, frozenset) else tag) + _U64.pack(len(value))
        for item in value:
            _encode(item, out, depth + 1)
    elif isinstance(value, dict):
        out += b"d" + _U64.pack(len(value))
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"a dict key {key!r} is not a str")
            _text(out, b"", key)
            _encode(item, out, depth + 1)
    else:
        raise ValueError(f"a value of type {type(value).__name__} has no code-free form")


def _byte_dtype() -> Any:
    import torch

    return torch.uint8


def encode_fields(value: Any) -> bytes:
    """``value`` (a dict of fields, or any value of the types above) in the payload form.

    Raises:
        ValueError: for a value of another type (naming it).
    """
    out = bytearray(MAGIC)
    _encode(value, out, 0)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data).cast("B")
        self.at = 0

    def take(self, n: int, what: str) -> memoryview:
        if n > len(self.data) - self.at:
            raise ValueError(f"{what} of {n} bytes runs past the payload's end at byte {self.at}")
        got = self.data[self.at : self.at + n]
        self.at += n
        return got

    def u64(self, what: str) -> int:
        return _U64.unpack(self.take(8, what))[0]

    def blob(self, what: str) -> memoryview:
        return self.take(self.u64(what), what)

    def text(self, what: str) -> str:
        try:
            return str(self.blob(what), "utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{what} is not UTF-8 ({e})") from None

    def shape(self, itemsize: int, what: str) -> tuple[tuple[int, ...], memoryview]:
        dims = self.blob(f"{what} shape")
        if len(dims) % 8:
            raise ValueError(f"{what} shape of {len(dims)} bytes is no whole number of dimensions")
        shape = tuple(int(d) for d in np.frombuffer(dims, dtype="<u8"))
        raw = self.blob(f"{what} data")
        count = 1
        for d in shape:
            count *= d
        if count * itemsize != len(raw):
            raise ValueError(f"{what} of shape {shape} needs {count * itemsize} bytes, not {len(raw)}")
        return shape, raw


def _decode(r: _Reader, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise ValueError(f"values nest deeper than {_MAX_DEPTH} levels")
    tag = bytes(r.take(1, "a tag"))
    if tag in (b"N", b"T", b"F"):
        return {b"N": None, b"T": True, b"F": False}[tag]
    if tag == b"i":
        text = r.text("an int")
        if len(text) > 4300 or not text.lstrip("-").isdigit():
            raise ValueError(f"an int {text[:40]!r} is not a decimal integer")
        return int(text)
    if tag == b"f":
        return _F64.unpack(r.take(8, "a float"))[0]
    if tag == b"b":
        return bytes(r.blob("bytes"))
    if tag in _TEXT:
        text = r.text("a text value")
        try:
            return _TEXT[tag](text)
        except (ValueError, ArithmeticError) as e:
            raise ValueError(f"{text[:40]!r} does not read as {_TEXT[tag]}: {e}") from None
    if tag in (b"a", b"g"):
        name = r.text("a dtype")
        if not _DTYPE.fullmatch(name):  # numpy parses some dtype strings as Python: only plain numbers reach it
            raise ValueError(f"numpy dtype {name[:40]!r} is not read here (numbers and bools only)")
        dtype = np.dtype(name)
        shape, raw = r.shape(dtype.itemsize, "an array")
        try:
            array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        except ValueError as e:
            raise ValueError(f"an array of shape {shape[:8]}: {e}") from None
        return array if tag == b"a" else array[()]
    if tag == b"t":
        return _tensor(r)
    if tag == b"I":
        return _image(r)
    if tag in _SEQUENCES:
        n = r.u64("a list length")
        if n > len(r.data) - r.at:  # every item takes a byte at least
            raise ValueError(f"a list of {n} items is longer than the payload")
        items = [_decode(r, depth + 1) for _ in range(n)]
        return items if tag == b"l" else _SEQUENCES[tag](items)
    if tag == b"d":
        n = r.u64("a dict length")
        if n > len(r.data) - r.at:
            raise ValueError(f"a dict of {n} items is longer than the payload")
        return {r.text("a dict key"): _decode(r, depth + 1) for _ in range(n)}
    raise ValueError(f"unknown tag {tag!r} at byte {r.at - 1}")


def _tensor(r: _Reader) -> Any:
    import torch

    name = r.text("a tensor dtype")
    if name not in _TORCH_DTYPES:
        raise ValueError(f"tensor dtype {name!r} is not read here")
    dtype = getattr(torch, name)
    shape, raw = r.shape(torch.empty((), dtype=dtype).element_size(), "a tensor")
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)


def _image(r: _Reader) -> Any:
    from PIL import Image

    mode = r.text("an image mode")
    if mode not in _IMAGE_MODES:
        raise ValueError(f"image mode {mode!r} is not read here")
    width, height = r.u64("an image width"), r.u64("an image height")
    palette_mode, palette = r.text("a palette mode"), bytes(r.blob("a palette"))
    raw = r.blob("image pixels")
    if width * height > 8 * len(raw) + 8:  # every mode takes a bit a pixel at least: allocation stays bounded
        raise ValueError(f"an image of {width}x{height} pixels cannot lie in {len(raw)} bytes")
    try:
        image = Image.frombytes(mode, (width, height), bytes(raw))
        if palette_mode:
            image.putpalette(palette, palette_mode)
    except (ValueError, OSError) as e:
        raise ValueError(f"a {mode} image of {width}x{height}: {e}") from None
    return image


def decode_fields(data: bytes | memoryview) -> Any:
    """The value ``encode_fields`` wrote (no code runs: the form has no pickle).

    Raises:
        ValueError: when ``data`` is not such a payload or is damaged (saying what and where).
    """
    r = _Reader(data)
    if bytes(r.take(len(MAGIC), "the header")) != MAGIC:
        raise ValueError("not a torch_drt fields payload (its first bytes are not the header)")
    try:
        value = _decode(r, 0)
    except (OverflowError, RuntimeError, TypeError) as e:  # a shape numpy or torch cannot make
        raise ValueError(f"a value does not decode: {type(e).__name__}: {e}") from None
    if r.at != len(r.data):
        raise ValueError(f"{len(r.data) - r.at} bytes follow the value")
    return value


def sample_fields(sample: Any) -> dict[str, Any]:
    """The fields of a converted cache sample (a ``CachedSample``): its metadata columns and the fields its payload
    holds (a payload that is no fields form, written with ``payload=FIELD``, is left as ``"data"``).

    Raises:
        ValueError: when the payload starts as the fields form but is damaged.
    """
    data = sample.data
    fields = decode_fields(data) if bytes(data[: len(MAGIC)]) == MAGIC else {"data": bytes(data)}
    if not isinstance(fields, dict):
        fields = {"item": fields}
    return {**fields, **sample.metadata}
