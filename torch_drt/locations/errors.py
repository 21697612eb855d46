"""The error for stored bytes that are not what they should be: damaged, missing, truncated, not a cache."""

from __future__ import annotations

from pathlib import Path

from torch_drt.locations.location import Location


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


class MissingFile(CacheCorruptError):
    """A file the cache needs is not there (backends raise it so that callers can say which file it is)."""
