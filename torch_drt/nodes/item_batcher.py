"""ItemBatcher: batches of a node's items with their positions in the epoch (torchdata's Batcher, positioned)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from torchdata.nodes import BaseNode

from torch_drt._state_fields import StateFields, check_node_state
from torch_drt.describe import described


class ItemBatch(NamedTuple):
    """Items taken together from a node.

    Attributes:
        start: the position of the first item in the epoch.
        items: the items.
        before: the batcher's state before this batch (a resume from it yields this batch again).
        epoch: the epoch the batcher was told it walks (``ItemBatcher.epoch``; a loader sets it).
    """

    start: int
    items: list[Any]
    before: dict[str, Any]
    epoch: int = 0

    @property
    def positions(self) -> range:
        """The items' positions in the epoch (a node's items have no other index)."""
        return range(self.start, self.start + len(self.items))


class ItemBatcher(BaseNode[ItemBatch]):
    """Groups ``batch_size`` items of ``source`` (the last group may be short unless ``drop_last``).

    The state is the source's state after the last item taken plus the position, so a resume with another batch
    size continues at the same item. A state with ``next_epoch: True`` (a stream checkpointed at the end of its
    epoch: ``ItemBatcher.next_epoch(state)``) restores the source and then starts its next epoch, as torchdata's
    ``Loader`` does (``reset(state)`` then ``reset(None)``), so a node keeps its own epoch count across a resume.

    Args:
        source: the node whose items are batched.
        batch_size: items per batch.
        drop_last: drop a short last batch.
    """

    SOURCE_KEY = "source"
    POSITION_KEY = "position"
    NEXT_EPOCH_KEY = "next_epoch"
    AHEAD_KEY = "ahead"

    def __init__(self, source: BaseNode, batch_size: int, drop_last: bool = False) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"{batch_size=} must be > 0")
        self.source, self.batch_size, self.drop_last = source, batch_size, drop_last
        self.epoch = 0
        self._position = 0
        self._skip: frozenset[int] = frozenset()

    def __repr__(self) -> str:
        return described(self, self.source, batch_size=self.batch_size, drop_last=self.drop_last)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._skip = frozenset()
        if initial_state is None:
            self.source.reset(None)
            self._position = 0
            return
        self.check_state(initial_state)
        position = initial_state[self.POSITION_KEY]
        self.source.reset(initial_state[self.SOURCE_KEY])
        if initial_state.get(self.NEXT_EPOCH_KEY):
            self.source.reset(None)
            position = 0
        self._position = position
        self._skip = frozenset(initial_state.get(self.AHEAD_KEY, ()))

    def check_state(self, state: Any, path: str = "state") -> None:
        """Refuse a state that is not this batcher's, its source's state included (where the source can tell).

        Raises:
            ValueError: naming the field (``path`` is where the state sits in a checkpoint).
        """
        fields = StateFields(state, "node", path, keys=(self.SOURCE_KEY, self.POSITION_KEY))
        position = fields.int(self.POSITION_KEY)
        fields.bool(self.NEXT_EPOCH_KEY, default=False)
        if fields.get(self.AHEAD_KEY) is not None:
            fields.ints(self.AHEAD_KEY, ok=lambda p: p > position, must="(later batch starts)")
        check_node_state(self.source, state[self.SOURCE_KEY], fields.where(self.SOURCE_KEY))

    def next(self) -> ItemBatch:
        before = self.get_state()
        items: list[Any] = []
        try:
            while len(items) < self.batch_size:
                items.append(next(self.source))
        except StopIteration:
            if not items or self.drop_last:
                raise
        batch = ItemBatch(self._position, items, before, self.epoch)
        self._position += len(items)
        if self._skip and batch.start in self._skip:  # delivered ahead of an older batch before the checkpoint
            return self.next()
        return batch

    def get_state(self) -> dict[str, Any]:
        state = {self.SOURCE_KEY: self.source.state_dict(), self.POSITION_KEY: self._position}
        skip = sorted(p for p in self._skip if p >= self._position) if self._skip else None
        return state | {self.AHEAD_KEY: skip} if skip else state

    @classmethod
    def next_epoch(cls, state: dict[str, Any] | None) -> dict[str, Any] | None:
        """The state that starts the epoch after the one ``state`` ended (None stays None: a fresh start)."""
        if state is None:
            return None
        return {cls.SOURCE_KEY: state[cls.SOURCE_KEY], cls.POSITION_KEY: 0, cls.NEXT_EPOCH_KEY: True}

    def state_before(self, batch: ItemBatch, ahead: Sequence[ItemBatch] = ()) -> dict[str, Any]:
        """The state whose next batch is ``batch``, skipping the later batches ``ahead`` (delivered out of order)."""
        skip = sorted({b.start for b in ahead} | {p for p in self._skip if p > batch.start})
        return batch.before | {self.AHEAD_KEY: skip} if skip else batch.before
