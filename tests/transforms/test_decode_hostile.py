"""Decode on hostile bytes: mutated images never crash the interpreter, deep images are refused.

Every decode of hostile bytes runs in a forked child process, so a native crash fails the test instead of killing
pytest.
The default suite runs a small deterministic sample (mutations that crashed torchvision's PNG decoder before the
fix); the full sweep over every format is behind ``-m slow``.
"""

from __future__ import annotations

import io
import os
import struct
import zlib

import numpy as np
import pytest
from PIL import Image as P

from torch_drt import transforms as T


def _decode_from(cases: list[bytes], start: int, out: int) -> None:
    """The child's work: decode ``cases[start:]`` in turn, a line to the pipe ``out`` before and after each."""
    import torch

    from torch_drt.transforms import Decode

    torch.set_num_threads(1)  # OpenMP's threads do not survive a fork: a parallel region would wait for them forever
    decode = Decode()
    with os.fdopen(out, "w") as report:
        for i in range(start, len(cases)):
            print(f"start {i}", file=report, flush=True)
            try:
                decode(cases[i])
                print(f"decoded {i}", file=report, flush=True)
            except ValueError:
                print(f"refused {i}", file=report, flush=True)
            except BaseException as e:
                print(f"raised {i} {type(e).__name__}: {str(e)[:200]!r}", file=report, flush=True)


def _forked(cases: list[bytes], start: int) -> tuple[str, int]:
    """Run ``_decode_from`` in a forked child (a crash there ends the child, not pytest; a fork costs no interpreter
    start-up); its report and its return code (negative for a signal, as subprocess gives it)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            _decode_from(cases, start, write)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as report:
        text = report.read()
    _, status = os.waitpid(pid, 0)
    return text, -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def decode_in_children(cases: list[bytes]) -> dict[int, str]:
    """Decode each case in a child process (restarted after a crash); return {case: outcome}.

    An outcome is ``decoded``, ``refused`` (ValueError), ``raised <type>: <message>`` or ``crashed <signal>``.
    """
    outcomes: dict[int, str] = {}
    start = 0
    while start < len(cases):
        stdout, returncode = _forked(cases, start)
        current = None
        for line in stdout.splitlines():
            kind, rest = line.split(" ", 1)
            index = int(rest.split(" ", 1)[0])
            if kind == "start":
                current = index
            else:
                outcomes[index] = kind if kind != "raised" else line
        if returncode == 0:
            break
        assert current is not None, f"the child failed before its first case (exit {returncode})"
        outcomes[current] = f"crashed {returncode}"
        start = current + 1
    return outcomes


def _encode(arr: np.ndarray, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    P.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr).save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def seed_images(fmt: str) -> list[bytes]:
    """Small valid images of each mode the format has."""
    rng = np.random.default_rng(0)
    shapes = [(23, 17, 1), (23, 17, 2), (23, 17, 3), (31, 9, 4)]
    if fmt == "PNG":
        out = [_encode(rng.integers(0, 256, s, dtype=np.uint8), "PNG") for s in shapes]
        pal = P.fromarray(rng.integers(0, 256, (23, 17, 3), dtype=np.uint8)).convert("P", palette=P.ADAPTIVE, colors=16)
        for kwargs in ({}, {"transparency": 3}):
            buf = io.BytesIO()
            pal.save(buf, format="PNG", **kwargs)
            out.append(buf.getvalue())
        return out
    if fmt == "JPEG":
        return [_encode(rng.integers(0, 256, (37, 29, c), dtype=np.uint8), "JPEG", quality=80, **kw)
                for c in (1, 3) for kw in ({"subsampling": 0}, {"subsampling": 2}, {"progressive": True})]
    if fmt == "WEBP":
        return [_encode(rng.integers(0, 256, (23, 17, c), dtype=np.uint8), "WEBP", lossless=lossless)
                for c in (3, 4) for lossless in (True, False)]
    modes = {"TIFF": (1, 3, 4), "BMP": (1, 3), "GIF": (1, 3)}[fmt]
    return [_encode(rng.integers(0, 256, (23, 17, c), dtype=np.uint8), fmt) for c in modes]


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One to four random byte writes, bit flips or truncations."""
    d = bytearray(data)
    for _ in range(int(rng.integers(1, 5))):
        if len(d) < 2:
            break
        i = int(rng.integers(0, len(d)))
        op = int(rng.integers(0, 3))
        if op == 0:
            d[i] = int(rng.integers(0, 256))
        elif op == 1:
            d[i] ^= 1 << int(rng.integers(0, 8))
        else:
            del d[i:]
    return bytes(d)


def mutations(fmt: str, n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    seeds = seed_images(fmt)
    return [mutate(seeds[i % len(seeds)], rng) for i in range(n)]


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_from_rows(width: int, height: int, depth: int, colour: int, raw: bytes, interlace: int = 0) -> bytes:
    """A PNG with the given header and already-filtered image data (valid CRCs)."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw))
            + _chunk(b"IEND", b""))


def _rgb_rows(width: int, height: int) -> bytes:
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 256, (height, width * 3), dtype=np.uint8)
    return b"".join(b"\x00" + r.tobytes() for r in rows)


def structural_png_faults() -> dict[str, bytes]:
    """PNGs whose headers are valid and whose image data is not: libpng fails while reading rows."""
    w, h = 17, 23
    raw = _rgb_rows(w, h)
    good = png_from_rows(w, h, 8, 2, raw)
    idat_at = good.index(b"IDAT") - 4
    length = struct.unpack(">I", good[idat_at : idat_at + 4])[0]
    data = bytearray(good)
    data[idat_at + 8 + length // 2] ^= 0x10  # a flipped bit inside the zlib stream, chunk CRC left stale
    stale_crc = bytes(data)
    body = bytes(data[idat_at + 4 : idat_at + 8 + length])
    data[idat_at + 8 + length : idat_at + 12 + length] = struct.pack(">I", zlib.crc32(body))
    bad_filter = bytearray(raw)
    bad_filter[0] = 7
    return {
        "zlib stream corrupt, CRC stale": stale_crc,
        "zlib stream corrupt, CRC valid": bytes(data),
        "filter type 7": png_from_rows(w, h, 8, 2, bytes(bad_filter)),
        "half the rows": png_from_rows(w, h, 8, 2, raw[: len(raw) // 2]),
        "rows cut inside the first": png_from_rows(w, h, 8, 2, raw[:5]),
        "IDAT cut short": good[: idat_at + 8 + length // 2],
    }


def typed(outcomes: dict[int, str], n: int) -> dict[int, str]:
    """The cases of ``outcomes`` that were neither decoded nor refused with ValueError (plus any not reached)."""
    bad = {i: o for i, o in outcomes.items() if o not in ("decoded", "refused")}
    return bad | {i: "not reached" for i in range(n) if i not in outcomes}


def test_png_with_corrupt_image_data_is_refused_not_crashed(sample):
    assert sample["faults"] == dict.fromkeys(range(len(structural_png_faults())), "refused")


def test_mutated_png_sample_never_crashes(sample):
    # 60 mutations of the PNG seeds; before the fix about one in three crashed torchvision's decoder (SIGSEGV)
    assert not typed(sample["png"], 60)


def test_mutated_tiff_sample_gives_typed_errors(sample):
    # case 379 of this sweep made Pillow raise TypeError while loading (found by the slow sweep)
    assert not typed(sample["tiff"], 40)


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "n"), [("PNG", 4000), ("JPEG", 4000), ("WEBP", 1000), ("TIFF", 1000),
                                        ("BMP", 1000), ("GIF", 1000)])
def test_mutation_sweep_never_crashes(fmt, n):
    cases = mutations(fmt, n, seed=11)
    assert not typed(decode_in_children(cases), len(cases))


# --- deep images: 16-bit and float samples are refused through every decode path ---


def _deep_png(colour: int, channels: int) -> bytes:
    w, h = 5, 3
    rows = np.arange(h * w * channels, dtype=">u2").reshape(h, w * channels) * 257
    raw = b"".join(b"\x00" + r.tobytes() for r in rows)
    return png_from_rows(w, h, 16, colour, raw)


def _tiff(bits: tuple[int, ...], sample_format: int = 1) -> bytes:
    """A minimal little-endian, uncompressed TIFF of 4 x 2 pixels with the given bits per sample."""
    w, h, spp = 4, 2, len(bits)
    pixels = bytes(range(256))[: w * h * spp * bits[0] // 8].ljust(w * h * spp * bits[0] // 8, b"\x01")
    entries = [(256, 3, 1, w), (257, 3, 1, h), (258, 3, spp, None), (259, 3, 1, 1), (262, 3, 1, 2 if spp >= 3 else 1),
               (273, 4, 1, None), (277, 3, 1, spp), (278, 3, 1, h), (279, 4, 1, len(pixels)),
               (339, 3, spp, None)]
    if spp == 4:
        entries.append((338, 3, 1, 2))
    entries.sort()
    ifd_at = 8
    extra_at = ifd_at + 2 + 12 * len(entries) + 4
    bits_at, fmt_at = extra_at, extra_at + 2 * spp
    pixels_at = fmt_at + 2 * spp
    out = bytearray(b"II*\x00" + struct.pack("<I", ifd_at) + struct.pack("<H", len(entries)))
    for tag, typ, count, value in entries:
        if tag == 258:
            value = bits[0] if spp == 1 else bits_at
        elif tag == 339:
            value = sample_format if spp == 1 else fmt_at
        elif tag == 273:
            value = pixels_at
        packed = struct.pack("<HI", value, 0)[:4] if typ == 3 and count == 1 else struct.pack("<I", value)
        out += struct.pack("<HHI", tag, typ, count) + packed
    out += struct.pack("<I", 0)
    out += b"".join(struct.pack("<H", b) for b in bits) + struct.pack("<H", sample_format) * spp + pixels
    return bytes(out)


def _jpeg_with_precision(bits: int) -> bytes:
    data = bytearray(_encode(np.zeros((8, 8, 3), np.uint8), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 4] = bits
    return bytes(data)


def _pillow_16bit_grey(fmt: str) -> bytes:
    buf = io.BytesIO()
    P.fromarray(np.arange(15, dtype=np.uint16).reshape(3, 5) * 4000).save(buf, format=fmt)
    return buf.getvalue()


def _float_tiff() -> bytes:
    buf = io.BytesIO()
    P.fromarray(np.linspace(0, 1, 15, dtype=np.float32).reshape(3, 5)).save(buf, format="TIFF")
    return buf.getvalue()


DEEP = {
    "PNG 16-bit RGB": _deep_png(2, 3),
    "PNG 16-bit RGBA": _deep_png(6, 4),
    "PNG 16-bit grey + alpha": _deep_png(4, 2),
    "PNG 16-bit grey": _deep_png(0, 1),
    "PNG 16-bit grey (Pillow)": _pillow_16bit_grey("PNG"),
    "TIFF 16-bit RGB": _tiff((16, 16, 16)),
    "TIFF 16-bit RGBA": _tiff((16, 16, 16, 16)),
    "TIFF 16-bit grey": _pillow_16bit_grey("TIFF"),
    "TIFF float": _float_tiff(),
    "JPEG 12-bit": _jpeg_with_precision(12),
}


def test_deep_images_are_refused(sample):
    assert {name: sample["deep"].get(i) for i, name in enumerate(DEEP)} == dict.fromkeys(DEEP, "refused")
    for name, data in DEEP.items():  # refused before decoding, so safe in this process
        with pytest.raises(ValueError, match=r"(16|12)-bit .*refused|float samples refused") as e:
            T.Decode()(data)
        assert "never cut" in str(e.value), name


def test_pillow_would_have_cut_16bit_rgb_to_8_bits():
    # the fixtures are what the refusal guards against: Pillow reads them as 8-bit images without a word
    for name in ("PNG 16-bit RGB", "PNG 16-bit RGBA", "PNG 16-bit grey + alpha", "TIFF 16-bit RGB"):
        im = P.open(io.BytesIO(DEEP[name]))
        im.load()
        assert im.mode in ("RGB", "RGBA", "LA"), (name, im.mode)


@pytest.fixture(scope="module")
def sample() -> dict[str, dict[int, str]]:
    """The default suite's cases decoded in one child process (restarted after any crash)."""
    groups = {"faults": list(structural_png_faults().values()), "png": mutations("PNG", 60, seed=1),
              "tiff": mutations("TIFF", 400, seed=11)[360:], "deep": list(DEEP.values())}
    outcomes = decode_in_children([c for cases in groups.values() for c in cases])
    out, start = {}, 0
    for name, cases in groups.items():
        out[name] = {i: outcomes[start + i] for i in range(len(cases)) if start + i in outcomes}
        start += len(cases)
    return out
