"""What the layers above the cache provide to it, registered by name (as fsspec names its implementations,
imported on first use) by ``torch_drt``'s face, which every import of the package runs first: the cache names
nothing above it.

Two roles:

- ``"caches"``: what loads the caches a path names: one cache, or the parts of a cache set (``torch_drt.sets``); a
  function of ``(path, *, verify, storage_options, remote_config)`` returning ``[(CacheLayout, metadata table),
  ...]``.
- ``"torch_dataloader"``: what builds ``CachedDataset.to_torch_dataloader``'s loader (the cache's loader wing,
  ``torch_drt.cache.loader``); a function of ``(dataset, **kwargs)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

ROLES = ("caches", "torch_dataloader")
_TARGETS: dict[str, str] = {}


def register(role: str, target: str) -> None:
    """Make ``target``, ``"module:function"`` (imported on first use), the one that plays ``role``.

    Raises:
        ValueError: for a role not in ``ROLES`` or a target not ``"module:function"``.
    """
    if role not in ROLES:
        raise ValueError(f"{role=} must be one of {ROLES}")
    module, sep, name = target.partition(":")
    if not (sep and module and name):
        raise ValueError(f"{target=} must be 'module:function'")
    _TARGETS[role] = target


def registered(role: str) -> Callable[..., Any]:
    """The function registered for ``role``.

    Raises:
        RuntimeError: when nothing is registered for it (``import torch_drt`` registers both).
    """
    if role not in _TARGETS:
        raise RuntimeError(f"nothing is registered for {role!r} (import torch_drt registers it)")
    module, _, name = _TARGETS[role].partition(":")
    return getattr(importlib.import_module(module), name)
