"""What loads the caches a path names: one cache, or the parts of a cache set (``torch_drt.sets``).

A set's format belongs to a package above the cache, so its loader is registered here by name (as fsspec names its
implementations, imported on first use) by ``torch_drt``'s face, which every import of the package runs first: the
cache names nothing above it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

_REGISTERED: list[str] = []


def register_caches_loader(target: str) -> None:
    """Load the caches of every path through ``target``, ``"module:function"`` (imported on first use): a function
    of ``(path, *, verify, storage_options, remote_config)`` returning ``[(CacheLayout, metadata table), ...]``."""
    module, sep, name = target.partition(":")
    if not (sep and module and name):
        raise ValueError(f"{target=} must be 'module:function'")
    _REGISTERED[:] = [target]


def caches_loader() -> Callable[..., list[tuple[Any, Any]]]:
    """The registered loader."""
    if not _REGISTERED:
        raise RuntimeError("no caches loader is registered (import torch_drt registers the cache sets' one)")
    module, _, name = _REGISTERED[0].partition(":")
    return getattr(importlib.import_module(module), name)
