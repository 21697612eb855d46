"""Per-record compression codecs (each record compressed on its own keeps random access).

Decompression is bounded: a record whose header claims more than the cache's ``max_record_bytes`` is refused
before any memory is asked for, so a flipped bit in a size field cannot request gigabytes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zstandard import ZstdDecompressor


def compressor(algo: str, level: int = 3) -> Callable[[bytes], bytes] | None:
    """Return a function compressing one record, or None for ``"none"``."""
    if algo == "none":
        return None
    if algo == "lz4":
        import lz4.block

        return lambda data: lz4.block.compress(data, store_size=True)
    if algo == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=level, write_content_size=True).compress
    raise ValueError(f"unknown compression {algo!r}")


def _lz4(limit: int) -> Callable[[bytes], bytes]:
    import lz4.block

    def decompress(data: bytes) -> bytes:
        if len(data) < 4:
            raise ValueError(f"record of {len(data)} bytes is shorter than its LZ4 size header")
        size = int.from_bytes(data[:4], "little")
        if size > limit:
            raise ValueError(f"record claims {size} bytes decompressed, more than this cache's bound of {limit}")
        try:
            return lz4.block.decompress(data)
        except Exception as e:  # LZ4BlockError: corrupt block
            raise ValueError(f"LZ4: {e}") from None

    return decompress


def _zstd(limit: int) -> Callable[[bytes], bytes]:
    import zstandard

    local = threading.local()  # a ZstdDecompressor is not thread-safe: one per reading thread

    def decompress(data: bytes) -> bytes:
        try:
            size = zstandard.frame_content_size(data)
        except zstandard.ZstdError as e:
            raise ValueError(f"zstd frame header: {e}") from None
        if size < 0:
            raise ValueError("zstd frame does not record its content size")
        if size > limit:
            raise ValueError(f"record claims {size} bytes decompressed, more than this cache's bound of {limit}")
        dctx = getattr(local, "dctx", None) or _new_dctx(local, zstandard)
        try:
            out = dctx.decompress(data, allow_extra_data=False)
        except zstandard.ZstdError as e:
            raise ValueError(f"zstd: {e}") from None
        if len(out) != size:
            raise ValueError(f"zstd frame decompressed to {len(out)} bytes, its header says {size}")
        return out

    return decompress


def _new_dctx(local: threading.local, zstandard: ModuleType) -> ZstdDecompressor:
    local.dctx = zstandard.ZstdDecompressor()
    return local.dctx


def decompressor(algo: str, limit: int) -> Callable[[bytes], bytes] | None:
    """Return a thread-safe function decompressing one record, or None for ``"none"``.

    Args:
        algo: ``"none"``, ``"lz4"`` or ``"zstd"``.
        limit: the most bytes one record may decompress to.

    The function raises ``ValueError`` for a damaged record (bad header, a size over ``limit``, bad data).
    """
    if algo == "none":
        return None
    if algo == "lz4":
        return _lz4(limit)
    if algo == "zstd":
        return _zstd(limit)
    raise ValueError(f"unknown compression {algo!r}")
