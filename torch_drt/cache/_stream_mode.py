"""The cache loader's mode: consumers' streams in torch's order, checkpointed as (pass, batches done)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch_drt.cache._consumer import RowFetcher
from torch_drt.loader.base import LoaderMode
from torch_drt.loader.position import Cursor
from torch_drt.loader.state import require_mapping, state_int, state_seed
from torch_drt.nodes.ordered_map import OrderedMapper
from torch_drt.nodes.stream_plan import StreamPlanner
from torch_drt.nodes.transport import SharedMemoryTransport

__all__ = ["StreamMode"]


class StreamMode(LoaderMode):
    """The cache loader's pipeline and checkpoint.

    The checkpoint is ``{version, epoch, batches_done}`` plus what makes the streams: ``world_size``,
    ``num_workers``, ``samples_per_epoch``, ``batch_size``, ``drop_last``, ``shuffle``, ``seed``,
    ``worker_partition``, ``shard_window`` and ``table_fingerprint``. A state whose settings differ is refused (the
    streams would be others), except a seed drawn with ``seed="random"``, which is adopted from the checkpoint. A
    state without ``shard_window`` (taken before it existed) reads as ``shard_window=None``. ``shard_window_order``
    names the way consumers share a shard-window order (2: blocks mirrored in odd passes, odd consumers reading
    theirs from its end); a state without it, of a loader whose consumers share one, was taken with way 1 and is
    refused rather than resumed on other rows.
    """

    VERSION = 1
    VERSION_KEY = "version"
    EPOCH_KEY = StreamPlanner.EPOCH_KEY
    DONE_KEY = StreamPlanner.DONE_KEY
    FINGERPRINT_KEY = "table_fingerprint"
    WINDOW_KEY = "shard_window"
    ORDER_KEY = "shard_window_order"
    ORDER = 2  # the way consumers share a shard-window order (see the class docstring)
    SETTINGS = (
        "world_size",
        "num_workers",
        "samples_per_epoch",
        "batch_size",
        "drop_last",
        "shuffle",
        "worker_partition",
        WINDOW_KEY,
        ORDER_KEY,
    )
    SEED_KEY = "seed"

    def __init__(self, fetcher: RowFetcher, settings: dict[str, Any], fingerprint: str, seed_given: bool) -> None:
        self.fetcher, self.fingerprint, self.seed_given = fetcher, fingerprint, seed_given
        shared = settings[self.WINDOW_KEY] is not None and _shared(settings)
        self.settings = {key: settings[key] for key in self.SETTINGS if key != self.ORDER_KEY}
        self.settings[self.ORDER_KEY] = self.ORDER if shared else None
        self.seed = settings["seed"]
        workers, context = settings["num_workers"], settings["multiprocessing_context"]
        self.planner = StreamPlanner(fetcher.plans, settings["batch_size"], settings["continue_streams"])
        self.mapper = OrderedMapper(
            self.planner,
            fetcher,
            num_workers=workers,
            in_flight=workers * (settings["prefetch_factor"] or 1),
            method="process",
            multiprocessing_context=None if context is None else context.get_start_method(),
            timeout=settings["timeout"],
            transport=SharedMemoryTransport(pin=settings["pin_memory"]),
            worker_init=settings["worker_init_fn"],
        )

    def start_state(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        return {OrderedMapper.SOURCE_KEY: cursor or {self.EPOCH_KEY: epoch, self.DONE_KEY: 0}}

    def at_end(self, cursor: Cursor) -> bool:
        return cursor is not None and cursor[self.DONE_KEY] >= self.planner.total

    def remaining(self, cursor: Cursor) -> int:
        return self.planner.total - (cursor[self.DONE_KEY] if cursor else 0)

    def num_batches(self) -> int:
        return self.planner.total

    def items_per_epoch(self) -> int:
        return sum(plan.sample_count for plan in self.fetcher.plans)

    def state_dict(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        return {
            self.VERSION_KEY: self.VERSION,
            self.EPOCH_KEY: epoch,
            self.DONE_KEY: cursor[self.DONE_KEY] if cursor else 0,
            **self.settings,
            self.SEED_KEY: self.seed,
            self.FINGERPRINT_KEY: self.fingerprint,
        }

    def parse_state(self, state: Any) -> tuple[int, Cursor]:
        keys = (self.VERSION_KEY, self.EPOCH_KEY, self.DONE_KEY, *self.SETTINGS, self.SEED_KEY, self.FINGERPRINT_KEY)
        if isinstance(state, Mapping) and self.WINDOW_KEY not in state:  # a checkpoint from before shard_window
            state = {**state, self.WINDOW_KEY: None}
        if isinstance(state, Mapping) and self.ORDER_KEY not in state:  # before the blocks were mirrored
            state = {**state, self.ORDER_KEY: 1 if state[self.WINDOW_KEY] is not None and _shared(state) else None}
        state = require_mapping(state, "cache loader", keys)
        state_int(state, self.VERSION_KEY, low=self.VERSION, high=self.VERSION, what="cache loader")
        epoch = state_int(state, self.EPOCH_KEY, what="cache loader")
        done = state_int(state, self.DONE_KEY, high=self.planner.total, what="cache loader")
        for key, ours in self.settings.items():
            if isinstance(ours, int) and not isinstance(ours, bool):
                state_int(state, key, what="cache loader")
            if state[key] != ours or type(state[key]) is not type(ours):
                raise ValueError(
                    f"the state was saved with {key}={state[key]!r}, this loader has {key}={ours!r}: "
                    "the consumers' streams differ, so it cannot resume there"
                )
        if state[self.FINGERPRINT_KEY] != self.fingerprint:
            raise ValueError("the state was taken on a different metadata table; apply the same update_metadata()")
        seed = state_seed(state, self.SEED_KEY, what="cache loader")
        if seed != self.seed:
            if self.seed_given or seed is None:
                raise ValueError(f"the state was saved with seed={seed!r}, this loader has seed={self.seed!r}")
            self.seed = seed  # seed="random": take the checkpoint's
            self.fetcher.reseed(seed)
            self.mapper.close()  # loading processes hold the old seed: start new ones
        return epoch, {self.EPOCH_KEY: epoch, self.DONE_KEY: done}


def _shared(settings: Mapping[str, Any]) -> bool:
    """Whether several consumers share one shard-window order by blocks (replicated, over workers or ranks)."""
    workers, world = settings.get("num_workers"), settings.get("world_size")
    if not isinstance(workers, int) or not isinstance(world, int):  # a malformed state: refused when checked
        return False
    return settings.get("worker_partition") == "replicate" and max(workers, 1) * world > 1
