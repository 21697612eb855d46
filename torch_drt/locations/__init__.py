"""Locations and the backends that read their bytes.

``Location.parse`` decides once whether a location is a local path or a URL; ``Location.backend()`` gives the
backend registered for its scheme. ``base.py`` defines a backend (three methods to override), one module per
backend beside it: ``local.py`` (memory maps), ``remote.py`` (fsspec URLs through the node cache or byte ranges).
A new backend is one module that subclasses ``CacheBackend`` and calls ``register_backend``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_drt.locations.base import CacheBackend, StoredFile
from torch_drt.locations.errors import CacheCorruptError, MissingFile
from torch_drt.locations.local import LocalBackend, LocalFile
from torch_drt.locations.location import ANY_URL, Location, is_url, register_backend, split_protocol
from torch_drt.locations.remote import RemoteBackend

if TYPE_CHECKING:
    from torch_drt.locations.remote_config import RemoteConfig

__all__ = [
    "ANY_URL",
    "CacheBackend",
    "CacheCorruptError",
    "LocalBackend",
    "LocalFile",
    "Location",
    "MissingFile",
    "RemoteBackend",
    "StoredFile",
    "backend_for",
    "is_url",
    "register_backend",
    "split_protocol",
]


def backend_for(
    location: str | Path | Location | CacheBackend,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> CacheBackend:
    """The backend of a location: a backend as it is, else ``Location.parse(...).backend()`` (a path or
    ``file://`` URL: the local one; a URL: its scheme's, by default fsspec's: ``s3``, ``gs``, ``az``/``abfs``,
    ``http(s)``, ``memory``).

    Args:
        location: a path, a URL, a ``Location`` or a backend.
        storage_options: fsspec options for a URL (credentials, endpoint); ignored for local paths.
        remote_config: the remote settings for a URL (default ``RemoteConfig()``).

    Raises:
        TypeError: for anything else.
        ValueError: for a URL with credentials, a query or a fragment.
    """
    if isinstance(location, CacheBackend):
        return location
    if not isinstance(location, (str, Path, Location)):
        raise TypeError(f"a cache location must be a str, Path or CacheBackend, got {type(location).__name__}")
    return Location.parse(location, storage_options, remote_config).backend()
