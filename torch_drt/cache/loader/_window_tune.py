"""``shard_window="auto"``: the shard window of caches at URLs, chosen at each epoch's start from the statistics.

The window is the number of shards a consumer reads mixed at a time (``torch_drt.sampling.locality``): a wider one
shuffles better, but its shards must all be in the node cache at once, downloaded as the window starts. An epoch's
window, and so its row order, is fixed when the epoch starts: it changes only once an epoch's last batch was
delivered (before a checkpoint can be taken there), and the checkpoint keeps it (``state["shard_window_auto"]``),
so a resume reads the rows an uninterrupted run reads.

- The ceiling (``capacity``): the windows of the node's readers fit in half its node cache,
  ``cache_limit // (2 * largest shard * readers)`` (readers: ``node_processes`` of this rank's consumers), and at
  most the shards there are.
- The first epoch reads ``min(START, capacity)``.
- After an epoch (``decide``): when the caller waited for data (``CONSUMER_BOUND`` of its time) and reads missed the
  node cache (``range_read`` bytes, served while their shard downloads, are ``MISS_SHARE`` of the bytes read), the
  downloads did not keep up with the window: it halves. Otherwise it doubles, up to the ceiling. An epoch that
  downloaded more than ``THRASH`` times the caches' bytes (the node cache evicted a window's shards before they
  were read) halves the ceiling too.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from torch_drt._cpu_budget import node_processes
from torch_drt._state_fields import StateFields
from torch_drt.loader._tuner import CONSUMER_BOUND

AUTO = "auto"
STATE_KEY = "shard_window_auto"
START = 8
MISS_SHARE = 0.10
THRASH = 1.5


@dataclasses.dataclass(frozen=True)
class EpochReads:
    """What an epoch's statistics say of its reads: the share of the caller's time it waited for data, and the
    bytes downloaded, read by range (node-cache misses) and found in the node cache."""

    wait_share: float
    download: int
    range_read: int
    node_cache_hit: int

    @property
    def miss_share(self) -> float:
        """The share of the bytes read that missed the node cache."""
        read = self.range_read + self.node_cache_hit
        return self.range_read / read if read else 0.0


class WindowTune:
    """One loader's window and its ceiling (see the module docstring).

    Args:
        capacity: the widest window the node cache holds.
        total_bytes: the caches' shard bytes (what an epoch downloads at most without re-downloads).
    """

    def __init__(self, capacity: int, total_bytes: int) -> None:
        self.capacity, self.total_bytes = max(1, capacity), total_bytes
        self.window = min(START, self.capacity)
        self.epoch = 0  # the first epoch the window is in force for
        self._mark: tuple[int, int, int, dict[str, int]] = (0, 0, 0, {})  # the statistics at the epoch's start

    @classmethod
    def of(cls, dataset: Any, consumers: int, world_size: int) -> WindowTune:
        """The tuner of ``dataset``'s caches read by ``consumers`` per rank.

        Raises:
            ValueError: when no cache is at a URL (local caches have no downloads to tune the window by).
        """
        remote = [layout for layout in dataset.layouts if getattr(layout.backend, "config", None) is not None]
        if not dataset.reader.remote or not remote:
            raise ValueError(
                "shard_window='auto' tunes the window of caches at URLs by their downloads: give a number for "
                "local caches"
            )
        shards = [size for layout in dataset.layouts for _, size in layout.shards]
        readers = node_processes(consumers, world_size)
        limit = remote[0].backend.config.node_cache_limit()
        capacity = min(len(shards), limit // max(1, 2 * max(shards) * readers))
        return cls(capacity, sum(shards))

    def decide(self, reads: EpochReads) -> int:
        """The next epoch's window after an epoch of ``reads`` (the ceiling may come down too)."""
        if reads.download > THRASH * self.total_bytes:
            self.capacity = max(1, self.window // 2)
        if reads.wait_share >= CONSUMER_BOUND and reads.miss_share >= MISS_SHARE:
            return max(1, min(self.capacity, self.window // 2))
        return min(self.capacity, 2 * self.window)

    def begin(self, stats: Any) -> None:
        """An epoch starts: its statistics are counted from here."""
        stats.flush()
        self._mark = (stats.wall_ns, stats.wait_ns, stats.startup_ns, dict(stats.bytes))

    def end_epoch(self, stats: Any, next_epoch: int) -> int | None:
        """An epoch's last batch was delivered: the window of ``next_epoch`` on, when it changes (else None)."""
        wall0, wait0, startup0, bytes0 = self._mark
        stats.flush()
        startup = stats.startup_ns - startup0  # the first batch's wait: workers starting, not the window
        wall, wait = stats.wall_ns - wall0 - startup, stats.wait_ns - wait0 - startup
        moved = {key: stats.bytes.get(key, 0) - bytes0.get(key, 0) for key in ("download", "range_read",
                                                                                "node_cache_hit")}
        reads = EpochReads(min(1.0, max(0.0, wait / wall)) if wall > 0 else 0.0, **moved)
        window, self.epoch = self.decide(reads), next_epoch
        self.begin(stats)
        changed, self.window = window != self.window, window
        return window if changed else None

    def state(self) -> dict[str, int]:
        """What a checkpoint keeps: the window, the epoch it is in force from, and the ceiling."""
        return {"window": self.window, "epoch": self.epoch, "capacity": self.capacity}

    def load(self, state: Any) -> int:
        """Take a checkpoint's window and ceiling; the window.

        Raises:
            ValueError: naming the field of ``state["shard_window_auto"]`` that is not a window.
        """
        path = f"state[{STATE_KEY!r}]"
        if not isinstance(state, Mapping) or STATE_KEY not in state:
            raise ValueError(f"not a shard_window='auto' loader's state: it lacks {path}")
        fields = StateFields(state[STATE_KEY], "shard_window='auto'", path=path, keys=("window", "epoch"))
        window = fields.int("window", low=1, high=1 << 31)
        epoch = fields.int("epoch", low=0, high=1 << 62)
        capacity = fields.int("capacity", low=1, high=1 << 31, default=max(window, self.capacity))
        self.window, self.epoch, self.capacity = window, epoch, capacity
        return window


class WindowTuned:
    """The cache loader's side of ``shard_window="auto"``: the window in the checkpoint, taken from it on a resume,
    and chosen anew once an epoch's last batch was delivered (the loading processes restart with it)."""

    _window_tune: WindowTune | None = None

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()  # type: ignore[misc]
        if self._window_tune is not None:
            state[STATE_KEY] = self._window_tune.state()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        tune = self._window_tune
        if tune is None:
            return super().load_state_dict(state_dict)  # type: ignore[misc]
        copy.copy(tune).load(state_dict)  # refused before anything changes
        super().load_state_dict(state_dict)  # type: ignore[misc]
        self._mode.set_window(tune.load(state_dict))  # type: ignore[attr-defined]
        tune.begin(self._stats)  # type: ignore[attr-defined]

    def _end_epoch(self) -> None:
        super()._end_epoch()  # type: ignore[misc]
        if self._window_tune is not None:
            window = self._window_tune.end_epoch(self._stats, self._position.epoch)  # type: ignore[attr-defined]
            if window is not None:
                self._mode.set_window(window)  # type: ignore[attr-defined]
