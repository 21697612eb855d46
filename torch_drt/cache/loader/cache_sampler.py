"""CacheSampler: the rows of a CachedDataset's active table as a torchdata node, sharded across ranks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from torchdata.nodes import BaseNode

from torch_drt._cpu_budget import reading_processes
from torch_drt._state_fields import StateFields
from torch_drt.cache.rows import STRIDE, Consumer, RowStream, order_name
from torch_drt.describe import described
from torch_drt.sampling.stride import rank_share
from torch_drt.sampling.topology import resolve_topology

if TYPE_CHECKING:
    from torch_drt.cache.dataset import CachedDataset


class CacheSampler(BaseNode[int]):
    """Yields active-table rows: ``num_samples`` per epoch, one continuous stream across epochs.

    Rank r of W takes global positions r, r+W, ... of one stream over the table (the ranks' rows are disjoint
    within each pass of n positions). Sequential: position P is row ``P % n``. Shuffled (``sampling=
    "permutation"``, the default): position P is position ``P % n`` of epoch ``P // n``'s keyed permutation of
    the seed, so every row comes once per pass in a new order, as ``shuffle=True`` means everywhere in torch_drt
    (rows must then have equal weights). ``sampling="weighted"``: rows are drawn by weight with replacement from a
    stream keyed by (seed, rank, world_size), so every rank draws from the whole population with its own stream.

    The state is (stream position, items yielded this epoch, sampling, table fingerprint): any position resumes
    in O(1); a state taken on another table, or with another sampling, is refused (a state without ``sampling``,
    from before it was recorded, was taken with weighted draws when shuffled). ``reset()`` without a state starts
    the next epoch where the stream stands.

    For caches at URLs, it hands the dataset's reader the shards of its next rows in blocks of ``AHEAD_ROWS``
    positions (``ReadAhead``; the readers downstream, e.g. ``CacheReaderNode``, then find them local), within its
    share of the node cache's prefetch bytes (split among the node's processes that plan reads,
    ``torch_drt._cpu_budget.reading_processes``: this process, or a loader worker's ``num_workers``, in each local
    rank). For local caches it does nothing.

    Args:
        source: the dataset; its active table is snapshotted now.
        shuffle: shuffle the rows (default: the dataset's ``ReaderConfig.shuffle``).
        sampling: with ``shuffle``, ``"permutation"`` (every row once per pass) or ``"weighted"`` (draws by
            weight with replacement); default: the dataset's ``ReaderConfig.sampling``, else ``"permutation"``.
        seed: the stream seed (default: the dataset's ``ReaderConfig.seed``).
        num_samples: rows per epoch on this rank (default ``ceil(len(source) / world_size)``).
        rank: this rank (default: torch.distributed's, else 0).
        world_size: number of ranks (default: torch.distributed's, else 1).
    """

    POSITION_KEY = "position"
    YIELDED_KEY = "yielded"
    FINGERPRINT_KEY = "table_fingerprint"
    SAMPLING_KEY = "sampling"
    AHEAD_ROWS = 64  # the prefetch plan's unit: blocks of this many stream positions
    _CHUNK = 1024

    def __init__(
        self,
        source: CachedDataset,
        *,
        shuffle: bool | None = None,
        sampling: str | None = None,
        seed: int | None = None,
        num_samples: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__()
        self.rank, self.world_size = resolve_topology(rank, world_size)
        self.active = source.active
        self.shuffle = source.reader_config.shuffle if shuffle is None else shuffle
        self.seed = source.reader_config.seed if seed is None else seed
        self.num_samples = rank_share(len(source), world_size=self.world_size) if num_samples is None else num_samples
        if self.num_samples < 1:
            raise ValueError(f"num_samples={self.num_samples} must be > 0")
        configured = getattr(source.reader_config, "sampling", None)
        self.sampling = (sampling or configured or "permutation") if self.shuffle else None
        if self.sampling not in (None, "permutation", "weighted"):
            raise ValueError(f"sampling={self.sampling!r} must be 'permutation' or 'weighted'")
        self._stream = RowStream(order_name(self.shuffle, None, self.sampling), self.active, seed=self.seed,
                                 layout=STRIDE, who=Consumer(self.rank, self.world_size),
                                 what="CacheSampler(shuffle=True)")
        self._position = 0
        self._yielded = 0
        self._rows = np.empty(0, dtype=np.int64)
        self._rows_start = 0
        self._ahead = None
        if source.reader.remote:  # its windows and those of the node's other samplers add up in the node cache
            self._ahead = self._stream.read_ahead(source.reader, self._block, share=reading_processes(self.world_size))
        self._ahead_block = -1

    def __len__(self) -> int:
        """Rows per epoch (``num_samples``)."""
        return self.num_samples

    def __repr__(self) -> str:
        return described(self, rows=len(self.active), shuffle=self.shuffle,
                         sampling=self.sampling if self.sampling == "weighted" else None, seed=self.seed,
                         rank=self.rank, world_size=self.world_size, num_samples=self.num_samples)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            position, yielded = self.check_state(initial_state)
            self._position, self._yielded = position, yielded
        else:
            self._yielded = 0  # a new epoch continues the stream
        self._rows, self._rows_start = np.empty(0, dtype=np.int64), self._position

    def check_state(self, state: Any, path: str = "state") -> tuple[int, int]:
        """Refuse a state that is not this sampler's; return its ``(position, yielded)``.

        Raises:
            ValueError: naming the field (``path`` is where the state sits in a checkpoint).
        """
        fields = StateFields(state, "CacheSampler", path, keys=(self.POSITION_KEY, self.YIELDED_KEY))
        if fields.get(self.FINGERPRINT_KEY) != self.active.fingerprint:
            raise fields.error(
                self.FINGERPRINT_KEY, "was taken on a different metadata table: apply the same update_metadata() first"
            )
        saved = fields.get(self.SAMPLING_KEY, "weighted" if self.shuffle else None)
        if saved != self.sampling:
            raise ValueError(
                f"invalid CacheSampler state: it was taken with sampling={saved!r}, this sampler has "
                f"sampling={self.sampling!r} (shuffle=True reads a permutation since issue 21): pass "
                f"sampling={saved!r} to resume it"
            )
        return fields.int(self.POSITION_KEY), fields.int(self.YIELDED_KEY, high=self.num_samples)

    def _block(self, block: int) -> tuple[int, int]:
        """The stream positions of read-ahead block ``block``."""
        return block * self.AHEAD_ROWS, self.AHEAD_ROWS

    def _fill(self) -> None:
        self._rows, self._rows_start = self._stream.rows(self._position, self._CHUNK), self._position

    def next(self) -> int:
        if self._yielded >= self.num_samples:
            raise StopIteration
        k = self._position - self._rows_start
        if not 0 <= k < len(self._rows):
            self._fill()
            k = 0
        if self._ahead is not None and self._position // self.AHEAD_ROWS != self._ahead_block:
            self._ahead_block = self._position // self.AHEAD_ROWS
            self._ahead.before(self._ahead_block)
        self._position += 1
        self._yielded += 1
        return int(self._rows[k])

    def get_state(self) -> dict[str, Any]:
        return {
            self.POSITION_KEY: self._position,
            self.YIELDED_KEY: self._yielded,
            self.SAMPLING_KEY: self.sampling,
            self.FINGERPRINT_KEY: self.active.fingerprint,
        }
