"""PNG through libpng (imagecodecs): Pillow's pixels bit for bit, on the kinds it takes; the others stay with Pillow."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image as P

from torch_drt import transforms as T
from torch_drt.transforms import _png
from torch_drt.transforms._formats import png_header

MODES = {"L": (0, 1), "LA": (4, 2), "RGB": (2, 3), "RGBA": (6, 4)}  # Pillow mode -> (PNG colour type, channels)
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _image(mode: str, size: tuple[int, int], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (size[1], size[0], MODES[mode][1]), dtype=np.uint8)
    arr[: size[1] // 2] //= 16  # runs of small values next to noise: every filter type gets picked
    return arr


def pillow_png(arr: np.ndarray, **kwargs) -> bytes:
    buf = io.BytesIO()
    P.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr).save(buf, format="PNG", **kwargs)
    return buf.getvalue()


def interlaced_png(arr: np.ndarray) -> bytes:
    """An Adam7-interlaced PNG (Pillow writes none), filter type Sub on every row."""
    h, w, c = arr.shape
    raw = b""
    for x0, y0, dx, dy in ADAM7:
        sub = arr[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        flat = sub.reshape(sub.shape[0], -1).astype(np.int16)
        diff = flat.copy()
        diff[:, c:] -= flat[:, :-c]
        raw += b"".join(b"\x01" + (row % 256).astype(np.uint8).tobytes() for row in diff)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, {1: 0, 2: 4, 3: 2, 4: 6}[c], 0, 0, 1)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


def pillow_pixels(data: bytes) -> np.ndarray:
    arr = np.array(P.open(io.BytesIO(data)))
    return arr[:, :, None] if arr.ndim == 2 else arr


def with_chunks_before_idat(data: bytes, *chunks: bytes) -> bytes:
    at = data.index(b"IDAT") - 4
    return data[:at] + b"".join(chunks) + data[at:]


def test_imagecodecs_is_installed():
    assert _png._png_decode is not None  # a dependency: without it every PNG would silently take the slow path


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("size", [(1, 1), (7, 3), (33, 17), (224, 150)])
@pytest.mark.parametrize("kind", ["pillow", "pillow level 1", "interlaced", "extra chunks"])
def test_libpng_path_equals_pillow_bit_for_bit(mode, size, kind):
    arr = _image(mode, size)
    if kind == "interlaced":
        data = interlaced_png(arr)
    elif kind == "pillow level 1":
        data = pillow_png(arr, compress_level=1)
    else:
        data = pillow_png(arr)
    if kind == "extra chunks":  # colour metadata that neither decoder applies, and text
        data = with_chunks_before_idat(data, _chunk(b"gAMA", struct.pack(">I", 45455)), _chunk(b"sRGB", b"\x00"),
                                       _chunk(b"tEXt", b"note\x00hello"))
    assert _png.eligible(data, png_header(data))
    out = T.Decode()(data)
    assert out.shape == (MODES[mode][1], size[1], size[0])
    assert np.array_equal(out.hwc.numpy(), pillow_pixels(data))
    assert np.array_equal(out.hwc.numpy(), arr)


@pytest.mark.parametrize("case", ["tRNS on RGB", "tRNS on grey", "palette", "1-bit", "animated", "tRNS named in text"])
def test_kinds_pillow_converts_stay_with_pillow(case):
    arr = _image("RGB", (9, 5))
    if case == "tRNS on RGB":
        data = pillow_png(arr, transparency=(1, 2, 3))
    elif case == "tRNS on grey":
        data = pillow_png(arr[:, :, :1], transparency=7)
    elif case == "palette":
        buf = io.BytesIO()
        P.fromarray(arr).convert("P", palette=P.ADAPTIVE).save(buf, format="PNG")
        data = buf.getvalue()
    elif case == "1-bit":
        buf = io.BytesIO()
        P.fromarray(arr[:, :, 0]).convert("1").save(buf, format="PNG")
        data = buf.getvalue()
    elif case == "animated":
        buf = io.BytesIO()
        frames = [P.fromarray(arr), P.fromarray(255 - arr)]
        frames[0].save(buf, format="PNG", save_all=True, append_images=frames[1:])
        data = buf.getvalue()
    else:  # the four bytes inside another chunk: Pillow decodes, which is always right
        data = with_chunks_before_idat(pillow_png(arr), _chunk(b"tEXt", b"note\x00tRNS"))
    assert not _png.eligible(data, png_header(data))
    out = T.Decode()(data)
    if case in ("tRNS named in text", "animated"):  # Pillow's pixels as they are (the others it converts)
        assert np.array_equal(out.hwc.numpy(), pillow_pixels(data))


def test_corrupt_image_data_gives_a_typed_error_naming_png():
    data = bytearray(pillow_png(_image("RGB", (64, 48))))
    at = data.index(b"IDAT")
    data[at + 40] ^= 0xFF
    body = bytes(data[at : data.index(b"IEND") - 8])
    data[at + len(body) : at + len(body) + 4] = struct.pack(">I", zlib.crc32(body))  # a valid CRC: libpng inflates
    with pytest.raises(ValueError, match="corrupt or truncated PNG image"):
        T.Decode()(bytes(data))


def test_limits_are_checked_before_libpng_decodes():
    data = pillow_png(_image("RGB", (64, 48)))
    with pytest.raises(ValueError, match="refused before decoding"):
        T.Decode(max_alloc=64 * 48 * 3)(data)
    assert T.Decode(max_alloc=_png.peak(png_header(data))).apply(data).shape == (3, 48, 64)
