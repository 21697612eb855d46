"""Per-record compression codecs (each record compressed on its own keeps random access)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["compressor", "decompressor"]


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


def decompressor(algo: str) -> Callable[[bytes], bytes] | None:
    """Return a function decompressing one record, or None for ``"none"``.

    The zstd decompressor is not thread-safe, so each call site (reader thread) should ask for its own.
    """
    if algo == "none":
        return None
    if algo == "lz4":
        import lz4.block

        return lz4.block.decompress
    if algo == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompress
    raise ValueError(f"unknown compression {algo!r}")
