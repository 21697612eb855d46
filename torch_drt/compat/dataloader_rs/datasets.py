"""dataloader-rs's dataset bases and the checks its loader makes on a dataset when it is built."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["PyAsyncDataset", "PyDataset", "check_dataset", "is_async"]

_METHODS = ("__getitem__", "__getitems__", "aclose")


class PyDataset:
    """Base class of synchronous map-style datasets: implement ``__len__`` and ``__getitem__(index)``.

    Optionally ``__getitems__(indices)`` (one call per batch when ``item_concurrency == 1``; it must return one
    sample per index, in order; ``__getitems__ = None`` turns it off). Call ``super().__init__()`` if you
    define ``__init__``. Its methods run on several worker threads at once with ``num_workers > 0``.
    """

    def __init__(self) -> None:
        pass


class PyAsyncDataset:
    """Base class of asynchronous datasets: ``__len__``, ``async def __getitem__(index)``, optionally
    ``async def __getitems__(indices)`` (used when ``item_concurrency == 1``) and ``async def aclose()``.

    The coroutines run on the loader's own event loop (a background thread); objects tied to a loop (a client
    session) must be created inside them and released by ``aclose``, awaited once when the loader is closed or
    dropped.
    """

    def __init__(self) -> None:
        pass


def check_dataset(dataset: Any) -> None:
    """Refuse what dataloader-rs refuses when a loader is built.

    Raises:
        TypeError: a class with both bases, ``async def`` methods on a ``PyDataset``, plain ones on a
            ``PyAsyncDataset`` (``aclose`` included), or a dataset without ``__len__`` or ``__getitem__``.
    """
    cls, name = type(dataset), type(dataset).__name__
    if isinstance(dataset, PyDataset) and isinstance(dataset, PyAsyncDataset):
        raise TypeError(f"{name} derives from both PyDataset and PyAsyncDataset: choose one")
    for method in _METHODS:
        value = getattr(cls, method, None)
        if value is None:
            continue
        is_coroutine = inspect.iscoroutinefunction(value)
        if isinstance(dataset, PyDataset) and is_coroutine:
            raise TypeError(f"{name}.{method} is 'async def' on a PyDataset: derive from PyAsyncDataset")
        if isinstance(dataset, PyAsyncDataset) and not is_coroutine:
            raise TypeError(f"{name}.{method} must be 'async def' on a PyAsyncDataset")
    for method in ("__len__", "__getitem__"):
        if not hasattr(dataset, method):
            raise TypeError(f"{name} has no {method}: a dataset needs __len__ and __getitem__")


def is_async(dataset: Any) -> bool:
    """Whether ``dataset`` fetches by futures on an event loop (dataloader-rs's async and Rust datasets)."""
    from torch_drt.sources import FileDataset, HttpDataset, ObjectStoreDataset

    cls = type(dataset)
    return (
        isinstance(dataset, PyAsyncDataset | HttpDataset | FileDataset | ObjectStoreDataset)
        or inspect.iscoroutinefunction(getattr(cls, "__getitem__", None))
        or inspect.iscoroutinefunction(getattr(cls, "aget", None))
    )
