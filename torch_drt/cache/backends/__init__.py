"""Cache backends: where a cache's bytes come from (``base`` defines the interface, one module per backend)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_drt.cache.backends.base import CacheBackend, MissingFile, StoredFile
from torch_drt.cache.backends.local import LocalBackend, LocalFile
from torch_drt.location import Location

if TYPE_CHECKING:
    from torch_drt.cache.remote_config import RemoteConfig

__all__ = ["CacheBackend", "LocalBackend", "LocalFile", "MissingFile", "StoredFile", "backend_for"]


def backend_for(
    location: str | Path | CacheBackend,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
) -> CacheBackend:
    """The backend of a cache location: a backend as it is, a path (or ``file://`` URL) for the local one, any
    other ``scheme://`` URL for the remote one (fsspec: ``s3``, ``gs``, ``az``/``abfs``, ``http(s)``, ``memory``).

    Args:
        location: a path, a URL or a backend.
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
    parsed = Location.parse(location)
    if not parsed.is_remote:
        return LocalBackend(parsed.path)
    from torch_drt.cache.backends.remote import RemoteBackend

    return RemoteBackend(location if isinstance(location, str) else parsed.url, storage_options, remote_config)
