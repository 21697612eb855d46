"""Errors raised by the sample cache."""

from __future__ import annotations

from pathlib import Path

from torch_drt.location import Location

__all__ = ["CacheCorruptError", "FormatError", "UnsafeEncodingError"]


class CacheCorruptError(ValueError, RuntimeError):
    """A cache on disk is incomplete, damaged or not a cache at all.

    It is a ``ValueError`` and, like dataset-rt's errors for damaged caches, a ``RuntimeError``: code written
    for either keeps catching it.

    Attributes:
        path: the file (or directory) at fault: a ``Path``, or the URL (a str) of a remote file.
        reason: what is wrong with it.
    """

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Location.parse(path).target
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self):  # keep the two-argument constructor across pickling (worker processes)
        return (type(self), (self.path, self.reason))


class FormatError(CacheCorruptError):
    """A file of a dataset in another system's format (WebDataset, MDS, LitData, Parquet, Arrow) is damaged or is
    not what its index says (``torch_drt.formats``); ``path`` names the file, ``reason`` the field at fault."""


class UnsafeEncodingError(FormatError):
    """A column is encoded with pickle, which executes code when read: refused unless ``allow_pickle=True``."""
