"""Image headers read without decoding: PNG's IHDR, JPEG's start of frame, TIFF's sample layout."""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"


class PngHeader(NamedTuple):
    width: int
    height: int
    depth: int
    colour: int


class JpegHeader(NamedTuple):
    width: int
    height: int
    components: int
    precision: int
    progressive: bool


class WebpHeader(NamedTuple):
    width: int
    height: int
    alpha: bool
    animated: bool


def png_header(data: bytes | bytearray | memoryview) -> PngHeader | None:
    """The IHDR fields of a PNG, or None when the bytes do not start with a PNG signature and an IHDR chunk."""
    head = bytes(data[:26])
    if len(head) < 26 or not head.startswith(PNG_MAGIC) or head[12:16] != b"IHDR":
        return None
    return PngHeader(*struct.unpack(">IIBB", head[16:26]))


def jpeg_header(data: bytes | bytearray | memoryview) -> JpegHeader | None:
    """The start-of-frame fields of a JPEG, or None when no start-of-frame marker is found before the data ends."""
    view = memoryview(data)
    if bytes(view[:3]) != JPEG_MAGIC:
        return None
    pos, end = 2, len(view)
    while pos + 9 < end:
        if view[pos] != 0xFF:
            return None
        marker = view[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:  # markers without a length
            pos += 2
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height = (view[pos + 5] << 8) | view[pos + 6]
            width = (view[pos + 7] << 8) | view[pos + 8]
            progressive = marker in (0xC2, 0xC6, 0xCA, 0xCE)
            return JpegHeader(width, height, view[pos + 9], view[pos + 4], progressive)
        pos += 2 + ((view[pos + 2] << 8) | view[pos + 3])
    return None


def webp_header(data: bytes | bytearray | memoryview) -> WebpHeader | None:
    """The canvas size and flags of a WebP from its first chunk (VP8, VP8L or VP8X), or None when unreadable."""
    head = bytes(data[:30])
    if len(head) < 30 or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        return None
    kind, body = head[12:16], head[20:30]
    if kind == b"VP8 " and body[3:6] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", body[6:10])
        return WebpHeader(width & 0x3FFF, height & 0x3FFF, False, False)
    if kind == b"VP8L" and body[0] == 0x2F:
        bits = int.from_bytes(body[1:5], "little")
        return WebpHeader((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, bool(bits >> 28 & 1), False)
    if kind == b"VP8X":
        flags = body[0]
        width = int.from_bytes(body[4:7], "little") + 1
        height = int.from_bytes(body[7:10], "little") + 1
        return WebpHeader(width, height, bool(flags & 0x10), bool(flags & 0x02))
    return None


def tiff_deep_reason(im: Any) -> str | None:
    """Why an opened Pillow TIFF has samples deeper than 8 bits or of float type, or None when it has not.

    Pillow reads some of those as 8-bit modes (16-bit RGB as ``"RGB"``), so the tags decide, not the mode.
    """
    tags = getattr(im, "tag_v2", None)
    if tags is None:
        return None
    bits = tags.get(258, (1,))
    bits = bits if isinstance(bits, tuple) else (bits,)
    if any(int(b) > 8 for b in bits):
        return f"{max(int(b) for b in bits)}-bit samples"
    formats = tags.get(339, (1,))
    formats = formats if isinstance(formats, tuple) else (formats,)
    if any(int(f) == 3 for f in formats):
        return "float samples"
    return None
