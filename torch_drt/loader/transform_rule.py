"""How a loader calls its ``transform``: ``transform(index, item)`` or ``transform(item)``, by one rule.

The rule (this module is its only owner; the loader applies it once, at construction):

1. a ``torch_drt.transforms`` transform, or any ``torch.nn.Module`` (every torchvision transform and torchvision
   v2's ``Compose``, whose ``forward(*inputs)`` would take two arguments), is called as ``transform(item)``;
2. otherwise, a callable that accepts two positional arguments is called as ``transform(index, item)``
   (``*args`` counts as two);
3. otherwise, a callable that accepts one positional argument (a ``lambda x: ...``, torchvision v1's
   ``Compose``) is called as ``transform(item)``;
4. a callable without an inspectable signature (a builtin) is called as ``transform(index, item)``.

``index`` is the dataset index (map-style datasets) or the item's position in the stream (a torchdata node, an
``IterableDataset``). Every call runs in its item's scope, so ``torch_drt.random.item_generator()`` works in
either form.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch_drt.describe import short


class ItemOnly:
    """Adapts a one-argument transform to the loader's ``transform(index, item)`` call."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, index: int, item: Any) -> Any:
        return self.fn(item)

    def __repr__(self) -> str:
        return short(self.fn)


def _binds(signature: inspect.Signature, count: int) -> bool:
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


def takes_item_only(transform: Callable[..., Any]) -> bool:
    """Whether the loader calls ``transform(item)`` rather than ``transform(index, item)`` (the module's rule)."""
    import torch

    from torch_drt.transforms.base import Transform

    if isinstance(transform, Transform | torch.nn.Module):
        return True
    try:
        signature = inspect.signature(transform)
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return not _binds(signature, 2) and _binds(signature, 1)


def transform_hook(transform: Any) -> Callable[[int, Any], Any] | None:
    """``transform`` as the loader calls it, ``hook(index, item)``; None stays None.

    Raises:
        TypeError: when ``transform`` is not callable.
    """
    if transform is None:
        return None
    if not callable(transform):
        raise TypeError(f"transform must be callable, got {type(transform).__name__}")
    return ItemOnly(transform) if takes_item_only(transform) else transform
