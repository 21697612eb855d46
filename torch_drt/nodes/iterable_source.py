"""IterableSource: a torch ``IterableDataset`` as a torchdata node, resumable through torchdata's Stateful protocol."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import Any

from torchdata.nodes import BaseNode

from torch_drt._state_fields import StateFields
from torch_drt.describe import described


def is_stateful(obj: Any) -> bool:
    """torchdata's ``Stateful`` protocol: ``obj`` has callable ``state_dict`` and ``load_state_dict``."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


class IterableSource(BaseNode[Any]):
    """Yields ``iter(dataset)``'s items; its state resumes the stream as torchdata's ``StatefulDataLoader`` does.

    The state is ``{dataset, iterator, since}``: a snapshot of ``dataset.state_dict()`` (when the dataset is
    Stateful and is not its own iterator) and of ``iter(dataset).state_dict()`` (when the iterator is Stateful),
    plus the items yielded after that snapshot. A resume restores in torchdata's order (dataset state,
    ``iter(dataset)``, iterator state) and then skips ``since`` items; with neither Stateful, ``since`` counts
    the items of the epoch so far and the resume replays and skips them. Snapshots are taken when the state is
    asked for and at least ``every`` items were yielded since the last one (torchdata's
    ``snapshot_every_n_steps``: a loader passes ``n * batch_size``), and are deep copies.

    ``reset(state)`` restores the dataset state at once and the iterator lazily, so ``reset(state)`` followed
    by ``reset(None)`` (the next epoch of a stream checkpointed at its end) never replays an item.

    Args:
        dataset: an iterable (a torch ``IterableDataset``).
        every: items between snapshots of the Stateful states (1: every time the state is asked for).
    """

    DATASET_KEY = "dataset"
    ITERATOR_KEY = "iterator"
    SINCE_KEY = "since"

    def __init__(self, dataset: Iterable[Any], every: int = 1) -> None:
        super().__init__()
        if every < 1:
            raise ValueError(f"{every=} must be > 0")
        self.dataset, self.every = dataset, every
        self._iterator: Iterator[Any] | None = None
        self._pending: dict[str, Any] | None = None  # the iterator state and skip of a reset(state), not applied yet
        self._snapshot: dict[str, Any] = {self.DATASET_KEY: None, self.ITERATOR_KEY: None}
        self._since = 0

    def __repr__(self) -> str:
        return described(self, self.dataset, every=self.every)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._iterator = None
        if initial_state is None:
            self._pending = None
            self._snapshot = {self.DATASET_KEY: None, self.ITERATOR_KEY: None}
            self._since = 0
            return
        since = self.check_state(initial_state)
        dataset_state = initial_state.get(self.DATASET_KEY)
        if dataset_state is not None and is_stateful(self.dataset):
            self.dataset.load_state_dict(copy.deepcopy(dataset_state))  # type: ignore[attr-defined]
        self._pending = {self.ITERATOR_KEY: initial_state.get(self.ITERATOR_KEY), self.SINCE_KEY: since}
        self._snapshot = {self.DATASET_KEY: dataset_state, self.ITERATOR_KEY: initial_state.get(self.ITERATOR_KEY)}
        self._since = since

    def check_state(self, state: Any, path: str = "state") -> int:
        """Refuse a state that is not this node's; return its ``since`` (the dataset's own states are its own).

        Raises:
            ValueError: naming the field (``path`` is where the state sits in a checkpoint).
        """
        return StateFields(state, "IterableDataset stream", path, keys=(self.SINCE_KEY,)).int(self.SINCE_KEY)

    def _open(self) -> Iterator[Any]:
        iterator = iter(self.dataset)
        pending, self._pending = self._pending, None
        if pending is not None:
            if pending[self.ITERATOR_KEY] is not None and is_stateful(iterator):
                iterator.load_state_dict(copy.deepcopy(pending[self.ITERATOR_KEY]))  # type: ignore[attr-defined]
            for _ in range(pending[self.SINCE_KEY]):
                next(iterator)  # StopIteration: the stream is shorter than its checkpoint said; it ends here
        self._iterator = iterator
        return iterator

    def next(self) -> Any:
        iterator = self._iterator if self._iterator is not None else self._open()
        item = next(iterator)
        self._since += 1
        return item

    def _stateful(self) -> tuple[bool, bool]:
        iterator = self._iterator
        has_iterator = iterator is not None and is_stateful(iterator)
        return is_stateful(self.dataset) and iterator is not self.dataset, has_iterator

    def get_state(self) -> dict[str, Any]:
        dataset, iterator = self._stateful()
        if (dataset or iterator) and self._pending is None and (self._since >= self.every or self._since == 0):
            self._snapshot = {
                self.DATASET_KEY: copy.deepcopy(self.dataset.state_dict()) if dataset else None,  # type: ignore
                self.ITERATOR_KEY: copy.deepcopy(self._iterator.state_dict()) if iterator else None,  # type: ignore
            }
            self._since = 0
        return {**self._snapshot, self.SINCE_KEY: self._since}
