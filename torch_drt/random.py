"""Per-item randomness: each item's random generator is a pure function of (seed, epoch, position).

A loader opens a *batch scope* around each batch it loads (one context-variable write per batch, nothing per
item) and an *item scope* around each call of its ``transform``. Code running inside them asks for the item's
generator:

- inside ``transform`` (and random transforms of ``torch_drt.transforms``): ``item_generator()``;
- inside a dataset's ``__getitem__(index)``: ``item_generator(index)``, passing the index it was given (the
  loader maps it to the item's position; an index that occurs twice in one batch gets the positions of its
  occurrences in call order).

All calls for one item return the same ``torch.Generator``, so ``__getitem__`` and the transforms draw one
continuous stream per item. Because the stream is keyed by the item's global position in the epoch, and not by
worker, rank or batch, the draws are the same under any ``num_workers``, worker method, batch size, world size,
and after a resume. Outside a loader, ``item_generator()`` returns ``torch.default_generator`` (torchvision's
behaviour: ``torch.manual_seed`` reproduces it).

Example:
    >>> import torch
    >>> from torch_drt.random import item_generator, item_scope
    >>> with item_scope(seed=7, epoch=0, position=42):
    ...     a = torch.rand(2, generator=item_generator())
    >>> with item_scope(seed=7, epoch=0, position=42):
    ...     b = torch.rand(2, generator=item_generator())
    >>> bool(torch.equal(a, b))
    True
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from torch_drt.sampling import derive_key

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = [
    "ITEM_DOMAIN",
    "BatchSlot",
    "batch_scope",
    "batch_slot",
    "current_slot",
    "enter_batch",
    "exit_batch",
    "item_generator",
    "item_numpy_generator",
    "item_scope",
    "item_seed",
    "map_items",
]

ITEM_DOMAIN = 0x17E4  # separates item streams from the shuffle permutation's keys of the same seed
_SEED_MASK = (1 << 63) - 1


def item_seed(seed: int, epoch: int, position: int) -> int:
    """The 63-bit seed of the item at global ``position`` of ``epoch`` under the loader ``seed``."""
    return derive_key(ITEM_DOMAIN, seed, epoch, position) & _SEED_MASK


class _Batch:
    """The items of one batch being loaded: their positions, their indices and their generators."""

    __slots__ = ("_by_index", "_generators", "epoch", "indices", "positions", "seed")

    def __init__(self, seed: int, epoch: int, indices: Sequence[int], positions: Sequence[int]) -> None:
        if len(indices) != len(positions):
            raise ValueError(f"{len(indices)=} must equal {len(positions)=}")
        self.seed, self.epoch = seed, epoch
        self.indices, self.positions = indices, positions
        self._by_index: dict[int, list[int]] | None = None
        self._generators: dict[int, torch.Generator] = {}

    def position_of(self, index: int) -> int:
        """The position of the next unclaimed occurrence of ``index`` in this batch (the last one repeats)."""
        if self._by_index is None:
            by_index: dict[int, list[int]] = {}
            for i, p in zip(self.indices, self.positions):
                by_index.setdefault(int(i), []).append(int(p))
            self._by_index = {i: ps[::-1] for i, ps in by_index.items()}  # pop() from the end: call order
        stack = self._by_index.get(int(index))
        if not stack:
            raise LookupError(f"index {index} is not an item of the batch being loaded")
        return stack.pop() if len(stack) > 1 else stack[0]

    def generator(self, position: int) -> torch.Generator:
        gen = self._generators.get(position)
        if gen is None:
            import torch

            gen = torch.Generator()
            gen.manual_seed(item_seed(self.seed, self.epoch, position))
            self._generators[position] = gen
        return gen


_batch: contextvars.ContextVar[Any] = contextvars.ContextVar("torch_drt_batch", default=None)
_item: contextvars.ContextVar[int | None] = contextvars.ContextVar("torch_drt_item", default=None)


class BatchSlot:
    """A loader thread's batch slot: ``slot.batch = [seed, epoch, indices, positions]`` opens the batch's scope and
    ``slot.batch = None`` closes it, with no context-variable write per batch (see ``batch_slot``)."""

    __slots__ = ("batch",)

    def __init__(self) -> None:
        self.batch: list | None = None

    def __repr__(self) -> str:
        return f"BatchSlot({'open' if self.batch is not None else 'closed'})"


current_slot: Callable[[], Any] = _batch.get
"""This context's batch value, read in C: a loader's ``BatchSlot`` once ``batch_slot()`` made it (anything else:
call ``batch_slot()``)."""


def batch_slot() -> BatchSlot | None:
    """This context's batch slot, made on first use (once per thread); None inside a ``batch_scope``, where a loader
    uses ``enter_batch`` instead."""
    value = _batch.get()
    if type(value) is BatchSlot:
        return value
    if value is not None:
        return None
    slot = BatchSlot()
    _batch.set(slot)
    return slot


def _current() -> _Batch | None:
    batch = _batch.get()
    if type(batch) is BatchSlot:
        batch = batch.batch
    if type(batch) is list:  # entered by enter_batch: set up on first use, then kept for the batch
        if len(batch) == 4:
            batch.append(_Batch(*batch))
        return batch[4]
    return batch


def enter_batch(seed: int, epoch: int, indices: Sequence[int], positions: Sequence[int]) -> contextvars.Token:
    """``batch_scope``'s entry for a loader's hot path: one context-variable write, the generators set up lazily.

    Pair it with ``exit_batch(token)`` in a ``finally``.
    """
    return _batch.set([seed, epoch, indices, positions])


def exit_batch(token: contextvars.Token) -> None:
    """Leave the batch scope ``enter_batch`` opened."""
    _batch.reset(token)


def map_items(
    fn: Callable[..., Any], indices: Sequence[int] | None, items: Sequence[Any], positions: Sequence[int]
) -> list:
    """``[fn(index, item) ...]`` (``[fn(item) ...]`` when ``indices`` is None), each call in its item's scope
    (``item_scope``'s hot path for loaders).

    Each item sets the scope's position (a context copied during a call keeps that call's item); the scope is
    left once, after the last item or the first error: one ``reset`` per batch restores what was before it.
    """
    out: list = []
    append, enter = out.append, _item.set
    token = enter(_item.get())
    try:
        if indices is None:  # a one-argument transform: no wrapper call per item
            for item, position in zip(items, positions):
                enter(position)
                append(fn(item))
        else:
            for index, item, position in zip(indices, items, positions):
                enter(position)
                append(fn(index, item))
    finally:
        _item.reset(token)
    return out


@contextlib.contextmanager
def batch_scope(seed: int, epoch: int, indices: Sequence[int], positions: Sequence[int]) -> Iterator[None]:
    """Make the items of a batch (dataset ``indices`` at global ``positions``) reachable by ``item_generator``.

    Loaders call this once per batch; it costs one context-variable write, nothing per item.
    """
    token = _batch.set(_Batch(seed, epoch, indices, positions))
    try:
        yield
    finally:
        _batch.reset(token)


@contextlib.contextmanager
def item_scope(*, position: int, seed: int | None = None, epoch: int | None = None) -> Iterator[None]:
    """Make the item at ``position`` the current one (loaders wrap each ``transform`` call in it).

    Inside a batch scope, ``seed`` and ``epoch`` come from it; outside one (a user reproducing one item's
    augmentation), both must be given.
    """
    batch_token = None
    if _current() is None:
        if seed is None or epoch is None:
            raise ValueError("item_scope outside a loader batch needs seed= and epoch=")
        batch_token = _batch.set(_Batch(seed, epoch, (), ()))
    token = _item.set(position)
    try:
        yield
    finally:
        _item.reset(token)
        if batch_token is not None:
            _batch.reset(batch_token)


def item_generator(index: int | None = None) -> torch.Generator:
    """The current item's ``torch.Generator`` (CPU), or ``torch.default_generator`` outside a loader.

    Args:
        index: inside ``__getitem__``, the dataset index being loaded; leave it out inside ``transform``.

    Raises:
        RuntimeError: inside a batch without an item scope and without ``index`` (pass the index).
        LookupError: for an ``index`` that is not in the batch being loaded.
    """
    batch = _current()
    if batch is None:
        import torch

        return torch.default_generator
    position = _item.get()
    if index is not None:
        position = batch.position_of(index)
    elif position is None:
        raise RuntimeError("item_generator() inside __getitem__ needs the index: call item_generator(index)")
    return batch.generator(position)


def item_numpy_generator(index: int | None = None) -> np.random.Generator:
    """A ``numpy.random.Generator`` seeded from the current item's stream (see ``item_generator``).

    Each call draws its seed from the item's torch generator, so two calls give two independent generators and
    the sequence of calls is reproducible.
    """
    import numpy as np
    import torch

    seed = int(torch.randint(0, 1 << 62, (), generator=item_generator(index)).item())
    return np.random.Generator(np.random.Philox(seed))
