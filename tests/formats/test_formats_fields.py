"""The payload form of converted samples (torch_drt.formats.fields): every type the readers return comes back
exactly; hostile bytes are a ValueError naming what is wrong, never a crash, a hang or an allocation larger than
the data."""

from __future__ import annotations

import datetime
import random
import struct
from decimal import Decimal

import numpy as np
import pytest
import torch
from canon import canon
from PIL import Image

from torch_drt.formats import decode_fields, encode_fields
from torch_drt.formats.fields import MAGIC

pytestmark = pytest.mark.timeout(300)


def _rich() -> dict:
    rgb = Image.fromarray(np.arange(60, dtype=np.uint8).reshape(4, 5, 3), "RGB")
    palette = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=4)
    return {
        "none": None, "t": True, "f": False, "big": 1 << 80, "neg": -7, "x": 0.1, "s": "snow ☃", "b": b"\x00\xff",
        "dec": Decimal("1.250"), "when": datetime.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=datetime.UTC),
        "day": datetime.date(2026, 1, 2), "at": datetime.time(1, 2, 3),
        "arr": np.arange(6, dtype=">i4").reshape(2, 3), "f16": np.float16(1.5), "f64": np.float64(2.5),
        "u64": np.uint64(1 << 63), "cplx": np.complex64(1 + 2j), "empty": np.zeros((0, 3), np.float32),
        "tensor": torch.arange(6, dtype=torch.bfloat16).reshape(3, 2), "flag": torch.tensor([True, False]),
        "rgb": rgb, "pal": palette, "gray16": Image.fromarray(np.arange(12, dtype=np.uint16).reshape(3, 4)),
        "nested": [1, (2, "3"), {"k": [b"v"]}, {4, 5}, frozenset({"a"})],
    }


def test_every_type_comes_back_exactly():
    value = _rich()
    back = decode_fields(encode_fields(value))
    times = ("day", "at")  # canon has no form for them, nor for bfloat16
    assert [back.pop(k) for k in times] == [value.pop(k) for k in times]
    assert back["tensor"].dtype == torch.bfloat16 and torch.equal(back.pop("tensor"), value.pop("tensor"))
    assert canon(back) == canon(value)
    assert back["pal"].mode == "P" and back["pal"].getpalette() == value["pal"].getpalette()
    assert back["arr"].dtype == np.dtype(">i4")
    assert type(back["f64"]) is np.float64 and type(back["nested"][3]) is set


@pytest.mark.parametrize("value", [object(), np.array([object()]), {1: 2}, np.datetime64("2026-01-01")])
def test_values_without_a_code_free_form_are_refused_by_type(value):
    with pytest.raises(ValueError, match=r"no code-free form|is not a str"):
        encode_fields(value)


def _u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def _text(s: bytes) -> bytes:
    return _u64(len(s)) + s


@pytest.mark.parametrize(("body", "match"), [
    (b"l" + _u64(1 << 60), "longer than the payload"),
    (b"d" + _u64(1 << 60), "longer than the payload"),
    (b"b" + _u64(1 << 62) + b"x", "runs past"),
    (b"I" + _text(b"RGB") + _u64(1 << 31) + _u64(1 << 31) + _text(b"") + _text(b"") + _text(b"abc"),
     "cannot lie in 3 bytes"),
    (b"a" + _text(b"<f8") + _text(_u64(1 << 40) + _u64(1 << 40)) + _text(b""), "needs"),
    (b"a" + _text(b"<f8") + _text(_u64(0) + _u64(1 << 63)) + _text(b""), "an array of shape"),
    (b"a" + _text(b"|O") + _text(b"") + _text(b""), "not read here"),
    (b"t" + _text(b"float128") + _text(b"") + _text(b""), "not read here"),
    (b"I" + _text(b"XYZ") + _u64(1) + _u64(1) + _text(b"") + _text(b"") + _text(b"a"), "not read here"),
    (b"l" + _u64(1) + b"l" + _u64(1) + b"?", "unknown tag"),
    (b"i" + _text(b"9" * 5000), "not a decimal integer"),
    (b"z" + _text(b"not a time"), "does not read as"),
    (b"N" + b"trailing", "follow the value"),
])
def test_hostile_payloads_are_value_errors_naming_the_fault(body, match):
    with pytest.raises(ValueError, match=match):
        decode_fields(MAGIC + body)


def test_deep_nesting_is_refused_not_a_recursion_crash():
    with pytest.raises(ValueError, match="nest deeper"):
        decode_fields(MAGIC + (b"l" + _u64(1)) * 10_000 + b"N")
    with pytest.raises(ValueError, match="nest deeper"):
        value: list = []
        for _ in range(100):
            value = [value]
        encode_fields(value)


def test_not_a_payload_is_said_so():
    with pytest.raises(ValueError, match="not a torch_drt fields payload"):
        decode_fields(b"PAR1 not ours")


def test_flipped_and_cut_payloads_never_crash():
    good = encode_fields(_rich())
    rng = random.Random(0)
    outcomes = {"ValueError": 0, "value": 0}
    for _ in range(1500):
        body = bytearray(good)
        if rng.random() < 0.7:
            at = rng.randrange(len(body) * 8)
            body[at // 8] ^= 1 << (at % 8)
        else:
            del body[rng.randrange(len(body)):]
        try:
            decode_fields(bytes(body))
        except ValueError:
            outcomes["ValueError"] += 1
        else:
            outcomes["value"] += 1
    assert outcomes["ValueError"] > 500 and outcomes["value"] > 0  # flips in pixels or text still decode
