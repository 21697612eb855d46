"""CacheReaderNode: rows (or lists of rows) in, CachedSamples (or lists of them) out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from torchdata.nodes import BaseNode

from torch_drt._state_fields import StateFields, check_node_state
from torch_drt.cache.records import CachedSample
from torch_drt.describe import described

if TYPE_CHECKING:
    from torch_drt.cache.dataset import CachedDataset


class CacheReaderNode(BaseNode[Any]):
    """Reads the samples of the rows its source yields, from the dataset's active snapshot.

    A source item that is an int gives one ``CachedSample``; a list of ints (after torchdata's ``Batcher``)
    gives a list, read in one gather. Its state is its source's.

    Args:
        source: a node yielding active-table rows (e.g. ``CacheSampler``) or lists of them.
        dataset: the dataset whose caches and table the rows refer to.
    """

    SOURCE_KEY = "source"

    def __init__(self, source: BaseNode, dataset: CachedDataset) -> None:
        super().__init__()
        self.source = source
        self.dataset = dataset
        self.active = dataset.active

    def __len__(self) -> int:
        """The source's length (a ``TypeError`` when it has none)."""
        return len(self.source)

    def __repr__(self) -> str:
        return described(self, self.source, self.dataset)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            self.check_state(initial_state)
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])

    def check_state(self, state: Any, path: str = "state") -> None:
        """Refuse a state that is not this node's, its source's state included (where the source can tell).

        Raises:
            ValueError: naming the field (``path`` is where the state sits in a checkpoint).
        """
        fields = StateFields(state, "CacheReaderNode", path, keys=(self.SOURCE_KEY,))
        check_node_state(self.source, state[self.SOURCE_KEY], fields.where(self.SOURCE_KEY))

    def _read(self, rows: list[int]) -> list[CachedSample]:
        return self.dataset.read_rows(np.asarray(rows, dtype=np.int64), self.active).samples()

    def next(self) -> Any:
        item = next(self.source)
        if isinstance(item, int | np.integer):
            return self._read([int(item)])[0]
        return self._read(list(item))

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self.source.state_dict()}
