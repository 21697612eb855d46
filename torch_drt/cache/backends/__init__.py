"""Cache backends: where a cache's bytes come from (``base`` defines the interface, one module per backend)."""

from __future__ import annotations

from pathlib import Path

from torch_drt.cache.backends.base import CacheBackend, MissingFile, StoredFile
from torch_drt.cache.backends.local import LocalBackend, LocalFile

__all__ = ["CacheBackend", "LocalBackend", "LocalFile", "MissingFile", "StoredFile", "backend_for"]


def backend_for(location: str | Path | CacheBackend) -> CacheBackend:
    """The backend of a cache location: a backend as it is, a path for the local one.

    Raises:
        TypeError: for anything else.
        ValueError: for a URL of a scheme no backend serves yet.
    """
    if isinstance(location, CacheBackend):
        return location
    if isinstance(location, Path):
        return LocalBackend(location)
    if isinstance(location, str):
        scheme, sep, rest = location.partition("://")
        if not sep:
            return LocalBackend(location)
        if scheme == "file":
            return LocalBackend(rest)
        raise ValueError(f"no cache backend reads {scheme!r} locations yet (local paths and file:// only)")
    raise TypeError(f"a cache location must be a str, Path or CacheBackend, got {type(location).__name__}")
