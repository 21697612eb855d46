"""The reader position of a ``CachedDataset``: which rows a stream position reads, the windows iterators reserve,
and the checkpoint (``state_dict`` / ``load_state_dict``, O(1) to resume)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from torch_drt._state_fields import StateFields
from torch_drt.cache._table import ActiveTable
from torch_drt.cache.rows import RowStream

if TYPE_CHECKING:
    from torch_drt.cache.config import ReaderConfig
    from torch_drt.cache.reader import CacheReader


class Window:
    """One iterator's reserved window of the stream, and how much of it was delivered."""

    __slots__ = ("count", "delivered", "start")

    def __init__(self, start: int, count: int) -> None:
        self.start, self.count, self.delivered = start, count, 0


class DatasetPosition:
    """The position part of ``CachedDataset`` (a mixin: the dataset sets the attributes annotated here).

    Position ``p`` reads the row ``RowStream`` gives (the dataset is the one consumer of its stream): sequential,
    or shuffled (``ReaderConfig.shuffle``) every row once per epoch (the mode ``"permutation"``), the shard-window
    order (``"shard_window=W"``) or, with ``sampling="weighted"``, draws by weight with replacement (the mode
    ``"shuffle"``, dataset-rt's, and torch_drt's meaning of ``shuffle=True`` before issue 21).
    ``sampling_default`` says what ``ReaderConfig.sampling=None`` means.
    State keys are class constants; ``state_dict`` counts what the most recent iterator delivered.
    """

    STATE_VERSION = 2  # 2: with ``remaining``; 1 (without it) was always taken at an epoch's start
    MODE_KEY = "mode"
    POSITION_KEY = "position"
    REMAINING_KEY = "remaining"
    EPOCH_LEN_KEY = "epoch_len"
    FINGERPRINT_KEY = "table_fingerprint"
    SEED_KEY = "seed"
    VERSION_KEY = "version"

    reader: CacheReader
    reader_config: ReaderConfig
    _lock: threading.Lock
    _active: ActiveTable
    _epoch_len: int
    _position: int
    _latest: Window | None
    _resume_len: int | None
    _draws: tuple[ActiveTable, RowStream] | None
    sampling_default: ClassVar[str]

    def _sampling(self) -> str | None:
        """How this dataset's own iteration shuffles: None (sequential), ``"shard_window"``, ``"permutation"`` or
        ``"weighted"``."""
        config = self.reader_config
        if not config.shuffle:
            return None
        if config.shard_window is not None:
            return "shard_window"
        return config.sampling or self.sampling_default

    def row_stream(self, active: ActiveTable) -> RowStream:
        """The row stream of ``active`` (built once per table snapshot).

        Raises:
            ValueError: for an exact order over rows of unequal weights.
        """
        built = self._draws
        if built is not None and built[0] is active:
            return built[1]
        config, order = self.reader_config, self._sampling() or "sequential"
        stream = RowStream(order, active, seed=config.seed, window=config.shard_window, reader=self.reader,
                           what="shuffle=True (sampling='permutation')")
        self._draws = (active, stream)
        return stream

    def rows_at(self, active: ActiveTable, start: int, count: int) -> np.ndarray:
        """Active-table rows at reader positions ``start .. start+count-1`` (a pure function of them)."""
        return self.row_stream(active).rows(start, count)

    def _reserve(self) -> tuple[ActiveTable, Window]:
        self.row_stream(self._active)  # unequal weights are refused before a window is reserved
        with self._lock:
            count = self._epoch_len if self._resume_len is None else self._resume_len
            window = self._latest = Window(self._position, count)
            self._position += count
            self._resume_len = None
            return self._active, window

    def _mode(self) -> str:
        sampling = self._sampling()
        if sampling is None:
            return "sequential"
        if sampling == "shard_window":
            return f"shard_window={self.reader_config.shard_window}"
        return "shuffle" if sampling == "weighted" else "permutation"

    def state_dict(self) -> dict[str, Any]:
        """The reader position after the samples delivered so far: mode, stream position, samples left in the
        interrupted epoch (None: a whole epoch comes next), epoch length, seed and the table's fingerprint.

        It counts what the most recent iterator delivered: taken mid-iteration, a resume yields the rest of that
        epoch, then whole epochs, exactly as the uninterrupted reader would.
        """
        with self._lock:
            window = self._latest
            remaining: int | None
            if window is not None and window.delivered < window.count:
                position, remaining = window.start + window.delivered, window.count - window.delivered
            else:
                position, remaining = self._position, self._resume_len
            return {
                self.VERSION_KEY: self.STATE_VERSION,
                self.MODE_KEY: self._mode(),
                self.POSITION_KEY: position,
                self.REMAINING_KEY: remaining,
                self.EPOCH_LEN_KEY: self._epoch_len,
                self.SEED_KEY: self.reader_config.seed,
                self.FINGERPRINT_KEY: self._active.fingerprint,
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a saved position in O(1).

        Raises:
            ValueError: when the state was taken on another table, mode or seed, or is not a dataset state.
        """
        fields = StateFields(state, "CachedDataset", keys=(self.POSITION_KEY, self.EPOCH_LEN_KEY))
        version = fields.version(self.VERSION_KEY, self.STATE_VERSION, 1)
        if version is not None:  # a versioned state holds every key its version writes
            fields.require(self.MODE_KEY, self.SEED_KEY, self.FINGERPRINT_KEY)
            if version >= 2:
                fields.require(self.REMAINING_KEY)
        mode = self._mode()
        if state.get(self.FINGERPRINT_KEY) != self._active.fingerprint:
            raise ValueError(
                f"state was taken on a different metadata table ({self.FINGERPRINT_KEY} "
                f"{state.get(self.FINGERPRINT_KEY)!r} != {self._active.fingerprint!r}); apply the same "
                "update_metadata() before load_state_dict()"
            )
        if state.get(self.MODE_KEY) == "shuffle" and mode == "permutation":
            raise ValueError(
                "state was taken with mode='shuffle': draws by weight with replacement (what shuffle=True meant "
                "in earlier torch_drt versions); this dataset reads every row once per epoch "
                "(mode='permutation'): open it with ReaderConfig(sampling='weighted') to resume that state"
            )
        if state.get(self.MODE_KEY) != mode or state.get(self.SEED_KEY) != self.reader_config.seed:
            raise ValueError(
                f"state was taken with mode={state.get(self.MODE_KEY)!r} seed={state.get(self.SEED_KEY)!r}, "
                f"this dataset reads with mode={mode!r} seed={self.reader_config.seed!r}"
            )
        position = fields.int(self.POSITION_KEY)
        epoch_len = fields.int(self.EPOCH_LEN_KEY, low=1)
        remaining = fields.optional_int(self.REMAINING_KEY, low=1, default=None)
        with self._lock:
            self._position, self._epoch_len, self._resume_len, self._latest = position, epoch_len, remaining, None
