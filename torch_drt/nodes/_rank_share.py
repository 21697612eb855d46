"""RankShareNode: a rank's share of a global stream by the global-batch/stride rule (position r of each group of W)."""

from __future__ import annotations

from typing import Any, TypeVar

from torchdata.nodes import BaseNode

from torch_drt._state_fields import MAX_EPOCH, StateFields
from torch_drt.sampling.topology import resolve_topology

T = TypeVar("T")
_NONE: Any = object()


class RankShareNode(BaseNode[T]):
    """Delivers the global positions ``p`` with ``p % world_size == rank`` of a global stream (counted from where it
    resumed, when a checkpoint of another world size resumed it).

    The global stream is the subclass's: ``_take()`` returns its next item, ``_skip()`` passes over it (without
    reading, where the stream can); both raise ``StopIteration`` at the end of the epoch. Each ``next()`` handles
    one group of ``world_size`` positions: it takes this rank's and skips the others, so after k items every rank's
    state is the global stream at position k * world_size, whatever the rank. That is why a checkpoint of any rank
    resumes any other topology. ``reset(None)`` starts the next epoch once the current one has begun (an item
    taken or skipped, also before a checkpoint it was restored from), as torchdata's nodes do. Past the end of the
    stream, a rank whose position in the last group is missing gets ``_padding()``: by default none, its share
    ends there (the ranks' shares then differ by at most one item).

    Args:
        rank: this rank (default: torch.distributed's, else 0).
        world_size: number of ranks (default: torch.distributed's, else 1).
    """

    EPOCH_KEY = "epoch"
    POSITION_KEY = "position"
    ENDED_KEY = "ended"
    STARTED_KEY = "started"
    STREAM_KEY = "stream"

    def __init__(self, rank: int | None, world_size: int | None) -> None:
        super().__init__()
        self.rank, self.world_size = resolve_topology(rank, world_size)
        self._epoch, self._position, self._ended = 0, 0, False
        self._started = False
        self._failed: str | None = None

    def _restart(self, epoch: int, state: dict[str, Any] | None) -> None:
        """Begin the global stream of ``epoch``, at its start or at ``state`` (from ``_stream_state()``)."""
        raise NotImplementedError

    def _stream_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _check_stream(self, fields: StateFields) -> None:
        """Refuse a ``_stream_state()`` that is not this node's (a ValueError naming the field)."""
        raise NotImplementedError

    def _take(self) -> T:
        raise NotImplementedError

    def _skip(self) -> Any:
        raise NotImplementedError

    def _padding(self) -> T:
        """This rank's item of a last group that ends before its position (``StopIteration``: none)."""
        raise StopIteration

    def take(self) -> T:
        """The next item of the global stream, read (for a parent node; ``next()`` is for consumers).

        Raises:
            StopIteration: at the end of the epoch.
        """
        self._started = True
        return self._take()

    def skip(self) -> Any:
        """Pass over the next item of the global stream (without reading it, where the stream can).

        Raises:
            StopIteration: at the end of the epoch.
        """
        self._started = True
        return self._skip()

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is None:  # a new epoch, unless the current one has not begun
            self._epoch += 1 if self._started else 0
            self._position, self._ended, self._started = 0, False, False
            self._restart(self._epoch, None)
        else:
            self.check_state(initial_state)
            self._epoch = initial_state[self.EPOCH_KEY]
            self._position = initial_state[self.POSITION_KEY]
            self._ended = initial_state[self.ENDED_KEY]
            self._started = initial_state[self.STARTED_KEY]
            self._restart(self._epoch, initial_state[self.STREAM_KEY])
        self._failed = None

    def check_state(self, state: Any, path: str = "state") -> None:
        """Refuse a state that is not this node's (its sources' states included).

        Raises:
            ValueError: naming the field (``path`` is where the state sits in a checkpoint).
        """
        keys = (self.EPOCH_KEY, self.POSITION_KEY, self.ENDED_KEY, self.STARTED_KEY, self.STREAM_KEY)
        fields = StateFields(state, type(self).__name__, path, keys)
        fields.int(self.EPOCH_KEY, high=MAX_EPOCH)
        fields.int(self.POSITION_KEY)
        fields.bool(self.ENDED_KEY)
        fields.bool(self.STARTED_KEY)
        self._check_stream(fields.child(self.STREAM_KEY))

    def next(self) -> T:
        if self._failed:
            raise RuntimeError(f"{self._failed}; reset this node from a checkpoint to go on")
        self._started = True
        if self._ended:
            raise StopIteration
        mine = _NONE
        # One group of world_size positions, this rank's at offset ``rank`` in it. Not sampling.stride.owns(position):
        # a checkpoint of another world size resumes at a position that need not be a multiple of this one, and the
        # group (not position % world_size) keeps every rank's share disjoint (and, padded, of one length) from there.
        for i in range(self.world_size):
            try:
                if i == self.rank:
                    mine = self._take()
                else:
                    self._skip()
            except StopIteration:
                self._ended = True
                if i == 0:
                    raise
                break
            except Exception as e:
                self._failed = f"the stream stopped at position {self._position + i}: {type(e).__name__}"
                raise
        self._position += self.world_size
        return mine if mine is not _NONE else self._padding()

    def get_state(self) -> dict[str, Any]:
        return {
            self.EPOCH_KEY: self._epoch,
            self.POSITION_KEY: self._position,
            self.ENDED_KEY: self._ended,
            self.STARTED_KEY: self._started,
            self.STREAM_KEY: self._stream_state(),
        }
