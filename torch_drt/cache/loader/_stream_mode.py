"""The cache loader's mode: consumers' streams in torch's order, checkpointed as (pass, batches done)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Mapping
from typing import Any

from torch_drt._processes.transport import SharedMemoryTransport
from torch_drt._state_fields import MAX_EPOCH, StateFields
from torch_drt.cache.loader._consumer import RowFetcher
from torch_drt.cache.loader._loader_style import PER_RANK, PER_WORKER
from torch_drt.loader.base import LoaderMode
from torch_drt.loader.position import Cursor
from torch_drt.nodes.ordered_map import OrderedMapper
from torch_drt.nodes.stream_plan import StreamBatch, StreamPlanner
from torch_drt.sampling.budget import ConsumerPlan
from torch_drt.sampling.stride import world_total


class DealtPlanner(StreamPlanner):
    """A rank's one consumer whose batches are dealt to ``processes`` loading processes in turn: batch ``d`` of a
    pass goes to process ``d % processes`` and batches are delivered in the consumer's order, so the rows and their
    order do not depend on the number of processes (torch's round robin over workers delivers them the same way).

    Args:
        plans: the rank's one consumer plan.
        batch_size: items per batch.
        continue_streams: the stream continues across passes.
        processes: the loading processes (at least 1).
    """

    def __init__(
        self, plans: tuple[ConsumerPlan, ...], batch_size: int, continue_streams: bool, processes: int
    ) -> None:
        if len(plans) != 1:
            raise ValueError(f"batches are dealt from one consumer, not {len(plans)}")
        super().__init__(plans, batch_size, continue_streams)
        self.processes = max(1, processes)

    def next(self) -> StreamBatch:
        batch = super().next()
        return batch._replace(worker=batch.number % self.processes)


class StreamMode(LoaderMode):
    """The cache loader's pipeline and checkpoint.

    The checkpoint is ``{version, epoch, batches_done}`` plus what makes the streams: ``world_size``,
    ``num_workers``, ``samples_per_epoch``, ``batch_size``, ``drop_last``, ``shuffle``, ``sampling``, ``seed``,
    ``worker_partition``, ``shard_window``, ``continue_streams``, ``streams`` and ``table_fingerprint``. A state
    whose settings differ is refused (the streams would be others), except a seed drawn with ``seed="random"``,
    which is adopted from the checkpoint. ``streams`` is ``"per_rank"`` (torch_drt's datasets: one stream per rank
    dealt to the loading processes, so ``num_workers`` may differ) or ``"per_worker"`` (dataset-rt's: a stream per
    loading process, so ``num_workers`` must match; with at most one process both are the same).

    States of earlier versions lack keys: without ``shard_window`` (before it existed) it reads as None; without
    ``sampling`` (before issue 21) a shuffled state was taken with draws by weight (``"weighted"``) or with its
    shard window; without ``streams`` it is ``"per_worker"``; without ``continue_streams`` it is not checked (as
    before). ``shard_window_order`` names the way consumers share a shard-window order (2: blocks mirrored in odd
    passes, odd consumers reading theirs from its end); a state without it, of a loader whose consumers share one,
    was taken with way 1 and is refused rather than resumed on other rows.
    """

    VERSION = 1
    VERSION_KEY = "version"
    EPOCH_KEY = StreamPlanner.EPOCH_KEY
    DONE_KEY = StreamPlanner.DONE_KEY
    FINGERPRINT_KEY = "table_fingerprint"
    WINDOW_KEY = "shard_window"
    ORDER_KEY = "shard_window_order"
    SAMPLING_KEY = "sampling"
    STREAMS_KEY = "streams"
    CONTINUE_KEY = "continue_streams"
    WORKERS_KEY = "num_workers"
    ORDER = 2  # the way consumers share a shard-window order (see the class docstring)
    SETTINGS = (
        "world_size",
        "samples_per_epoch",
        "batch_size",
        "drop_last",
        "shuffle",
        SAMPLING_KEY,
        "worker_partition",
        WINDOW_KEY,
        ORDER_KEY,
        CONTINUE_KEY,
    )
    SEED_KEY = "seed"

    def __init__(self, fetcher: RowFetcher, settings: dict[str, Any], fingerprint: str, seed_given: bool,
                 reader_threads: Callable[[int], int] | None = None) -> None:
        self.fetcher, self.fingerprint, self.seed_given = fetcher, fingerprint, seed_given
        self.reader_threads = reader_threads  # reader threads per process for a number of processes (resize)
        self.streams, self.num_workers = settings[self.STREAMS_KEY], settings[self.WORKERS_KEY]
        shared = settings[self.WINDOW_KEY] is not None and _shared(settings)
        self.settings = {key: settings[key] for key in self.SETTINGS if key != self.ORDER_KEY}
        self.settings[self.ORDER_KEY] = self.ORDER if shared else None
        self.seed = settings["seed"]
        workers, context = settings[self.WORKERS_KEY], settings["multiprocessing_context"]
        if self.streams == PER_RANK:
            self.planner: StreamPlanner = DealtPlanner(fetcher.plans, settings["batch_size"],
                                                       settings[self.CONTINUE_KEY], workers)
        else:
            self.planner = StreamPlanner(fetcher.plans, settings["batch_size"], settings[self.CONTINUE_KEY])
        self.mapper = OrderedMapper(
            self.planner,
            fetcher,
            num_workers=workers,
            in_flight=batches_in_flight(workers, settings["prefetch_factor"], settings.get("prefetch_depth")),
            method="process",
            multiprocessing_context=None if context is None else context.get_start_method(),
            timeout=settings["timeout"],
            transport=SharedMemoryTransport(pin=settings["pin_memory"]),
            worker_init=settings["worker_init_fn"],
        )

    def resize(self, num_workers: int, in_flight: int) -> None:
        """Run ``num_workers`` loading processes from the next ``mapper.reset()`` on (``num_workers="tune"``): the
        rank's one stream is dealt to them in turn, so its rows stay the same; each reads with the reader threads
        ``reader_threads`` gives that many processes (``native_num_workers="auto"``: dataset-rt's budget for them)."""
        if self.streams != PER_RANK:
            raise ValueError("a loader whose loading processes read their own streams cannot change their number")
        self.mapper.resize(num_workers, in_flight)
        self.num_workers = num_workers
        self.planner.processes = self.fetcher.dealt_to = max(1, num_workers)  # type: ignore[attr-defined]
        if self.reader_threads is not None:
            self.fetcher.native_num_workers = threads = self.reader_threads(num_workers)
            if self.fetcher.events is not None:
                self.fetcher.events.native_threads = threads

    def set_window(self, window: int) -> None:
        """Read with shard window ``window`` from the next epoch on (``shard_window="auto"``): the loading processes
        restart with it."""
        self.fetcher.rewindow(window)
        self.mapper.close()

    def close(self) -> None:
        """Stop the workers, and the prefetch this process's reads planned (an abandoned loader downloads
        nothing more)."""
        super().close()
        self.fetcher.stop_prefetch()

    def start_state(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        return {OrderedMapper.SOURCE_KEY: self._start(epoch, cursor)}

    def _start(self, epoch: int, cursor: Cursor) -> dict[str, int]:
        return cursor or {self.EPOCH_KEY: epoch, self.DONE_KEY: 0}

    def starting(self, epoch: int, cursor: Cursor) -> None:
        """When this start forks loading processes, this process plans their first batches and requests their
        shards first (``RowFetcher.fetch_first``): the downloads are under way while the processes start, and forked
        processes inherit the reader and the streams it opened for that (a fork waits for the requests to go out:
        ``torch_drt.nodecache._warm_start``)."""
        if not self.mapper.starts_processes():
            return  # no processes, or the ones of the last start (they follow their own read-ahead)
        planner = copy.copy(self.planner)  # the batches the processes load first, as the pipeline plans them
        start = self._start(epoch, cursor)
        planner.reset(start)
        first = max(0, min(self.mapper.num_workers, self.planner.total - start[self.DONE_KEY]))
        with contextlib.suppress(Exception):  # a head start only: what fails here fails where the batches are read
            self.fetcher.fetch_first([planner.next() for _ in range(first)])

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
            self.WORKERS_KEY: self.num_workers,
            self.STREAMS_KEY: self.streams,
            **self.settings,
            self.SEED_KEY: self.seed,
            self.FINGERPRINT_KEY: self.fingerprint,
        }

    def _upgraded(self, state: Any) -> Any:
        """A state of an earlier version with the keys it lacks (see the class docstring)."""
        if not isinstance(state, Mapping):
            return state
        state = dict(state)
        state.setdefault(self.WINDOW_KEY, None)  # a checkpoint from before shard_window
        if self.ORDER_KEY not in state:  # before the blocks were mirrored
            state[self.ORDER_KEY] = 1 if state[self.WINDOW_KEY] is not None and _shared(state) else None
        if self.SAMPLING_KEY not in state:  # before issue 21: shuffle=True drew by weight, or walked its window
            shuffled, window = state.get("shuffle") is True, state[self.WINDOW_KEY] is not None
            state[self.SAMPLING_KEY] = ("permutation" if window else "weighted") if shuffled else None
        state.setdefault(self.STREAMS_KEY, PER_WORKER)
        state.setdefault(self.CONTINUE_KEY, self.settings[self.CONTINUE_KEY])  # not recorded then: not checked
        return state

    def _check_streams(self, state: Mapping[str, Any]) -> None:
        """Refuse a state whose streams are laid out otherwise (per worker, of another worker count)."""
        fields = StateFields(state, "cache loader")
        theirs, workers = fields.choice(self.STREAMS_KEY, (PER_RANK, PER_WORKER)), fields.int(self.WORKERS_KEY)
        theirs = PER_RANK if workers <= 1 else theirs  # at most one process: its stream is the rank's
        ours = PER_RANK if self.num_workers <= 1 else self.streams
        if theirs == ours == PER_RANK or (theirs == ours and workers == self.num_workers):
            return
        if theirs == PER_WORKER and ours == PER_RANK:
            raise ValueError(
                f"the state was saved with num_workers={workers} loading workers each reading its own stream "
                "(dataset-rt's layout, and torch_drt's in earlier versions); this loader reads one stream per rank "
                "whatever its num_workers, so the rows differ: resume it with torch_drt.compat.dataset_rt's loader "
                f"and num_workers={workers}, or start a new epoch"
            )
        if theirs == PER_RANK:
            raise ValueError(
                "the state was saved by a loader with one stream per rank (torch_drt's datasets); this loader "
                f"(torch_drt.compat.dataset_rt's) gives each of its num_workers={self.num_workers} loading workers "
                "its own stream, so the rows differ: resume it with torch_drt's own CachedDataset, or with at most "
                "one loading worker"
            )
        raise ValueError(
            f"the state was saved with num_workers={workers}, this loader has num_workers={self.num_workers}: "
            "torch_drt.compat.dataset_rt's loaders give each loading worker its own stream (dataset-rt's layout), "
            f"so it resumes only with num_workers={workers} (torch_drt's own datasets resume under any num_workers)"
        )

    def parse_state(self, state: Any) -> tuple[int, Cursor]:
        keys = (self.VERSION_KEY, self.EPOCH_KEY, self.DONE_KEY, self.WORKERS_KEY, self.STREAMS_KEY, *self.SETTINGS,
                self.SEED_KEY, self.FINGERPRINT_KEY)
        StateFields(state, "cache loader", keys=(self.VERSION_KEY,)).version(self.VERSION_KEY, self.VERSION)
        fields = StateFields(self._upgraded(state), "cache loader", keys=keys)
        state = fields.state
        epoch = fields.int(self.EPOCH_KEY, high=MAX_EPOCH)
        done = fields.int(self.DONE_KEY, high=self.planner.total)
        self._check_streams(state)
        if state[self.SAMPLING_KEY] == "weighted" and self.settings[self.SAMPLING_KEY] == "permutation":
            raise ValueError(
                "the state was saved with sampling='weighted': draws by weight with replacement (what shuffle=True "
                "meant in earlier torch_drt versions); this loader reads every row once per epoch "
                "(sampling='permutation'): pass sampling='weighted' to resume it"
            )
        for key, ours in self.settings.items():
            if isinstance(ours, int) and not isinstance(ours, bool):
                fields.int(key, high=MAX_EPOCH)
            if state[key] != ours or type(state[key]) is not type(ours):
                raise ValueError(
                    f"the state was saved with {key}={state[key]!r}, this loader has {key}={ours!r}: "
                    "the consumers' streams differ, so it cannot resume there"
                )
        if state[self.FINGERPRINT_KEY] != self.fingerprint:
            raise fields.error(
                self.FINGERPRINT_KEY, "was taken on a different metadata table: apply the same update_metadata()"
            )
        seed = fields.seed(self.SEED_KEY)
        if seed != self.seed:
            if self.seed_given or seed is None:
                raise ValueError(f"the state was saved with seed={seed!r}, this loader has seed={self.seed!r}")
            self.seed = seed  # seed="random": take the checkpoint's
            self.fetcher.reseed(seed)
            self.mapper.close()  # loading processes hold the old seed: start new ones
        return epoch, {self.EPOCH_KEY: epoch, self.DONE_KEY: done}


def batches_in_flight(workers: int, prefetch_factor: int | None, prefetch_depth: int | None) -> int:
    """Batches loading at most: ``workers + prefetch_depth`` as ``num_workers="tune"`` sets them, else torch's
    ``workers * prefetch_factor``."""
    if prefetch_depth is not None:
        return workers + prefetch_depth
    return workers * (prefetch_factor or 1)


def _shared(settings: Mapping[str, Any]) -> bool:
    """Whether several consumers share one shard-window order by blocks (replicated, over workers or ranks)."""
    workers, world = settings.get("num_workers"), settings.get("world_size")
    if not isinstance(workers, int) or not isinstance(world, int):  # a malformed state: refused when checked
        return False
    consumers = 1 if settings.get("streams", PER_WORKER) == PER_RANK else max(workers, 1)
    return settings.get("worker_partition") == "replicate" and world_total(consumers, world_size=world) > 1
