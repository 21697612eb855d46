"""IterableDataset with process workers: one stream per worker, as in torch (``WorkerTurns`` + ``StreamFetcher``).

(With thread workers or none, an IterableDataset is one stream iterated in the loader's thread: node mode over
``IterableSource``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from torch_drt._state_fields import StateFields
from torch_drt.loader._fetch_stage import fetch_stage
from torch_drt.loader._item_fetch import ItemBatchFetcher
from torch_drt.loader.base import LoaderMode
from torch_drt.loader.iterator import Fetched
from torch_drt.loader.position import Cursor
from torch_drt.nodes.item_batcher import ItemBatcher
from torch_drt.nodes.iterable_source import IterableSource
from torch_drt.nodes.ordered_map import OrderedMapper
from torch_drt.nodes.worker_turns import StreamTask, WorkerTurns
from torch_drt.sampling.stride import stride_position


class StreamResult(NamedTuple):
    """A worker's answer: its batch (None when its stream ended), its stream state after it, or its error."""

    worker: int
    fetched: Fetched | None
    state: dict[str, Any] | None
    ended: bool
    error: BaseException | None = None


class StreamFetcher:
    """Runs in each worker process: the worker's own stream of its copy of the dataset, batched, transformed and
    collated. Item j of worker w's stream is numbered ``(j * num_workers + w) * world_size + rank``.

    Args:
        dataset: the IterableDataset (each worker process holds its own copy).
        batch_size, drop_last: batching of each worker's stream (torch's: per worker).
        items: transforms and collates a batch's items (``ItemBatchFetcher``).
        num_workers: workers (the numbering's stride).
        every: items between snapshots of the dataset's Stateful state.
    """

    def __init__(
        self, dataset: Any, batch_size: int, drop_last: bool, items: ItemBatchFetcher, num_workers: int, every: int
    ) -> None:
        self.batcher = ItemBatcher(IterableSource(dataset, every), batch_size, drop_last)
        self.items, self.num_workers = items, num_workers
        self.epoch: int | None = None

    def __call__(self, task: StreamTask) -> StreamResult:
        if task.start is not None:
            self.batcher.reset(task.start["state"])
            self.epoch = task.epoch
        elif self.epoch != task.epoch:
            raise RuntimeError(
                "this worker process was started mid-epoch (its predecessor died or timed out): its IterableDataset "
                "stream is lost; resume from the last checkpoint"
            )
        try:
            batch = self.batcher.next()
        except StopIteration:
            return StreamResult(task.worker, None, self.batcher.get_state(), True)
        except Exception as e:  # the stream's own error: the loader raises it after recording the state
            return StreamResult(task.worker, None, self.batcher.get_state(), False, e)
        n, w = self.num_workers, task.worker
        numbers = [stride_position(j * n + w, rank=self.items.offset, world_size=self.items.stride)
                   for j in batch.positions]
        fetched = (self.items.apply(task.epoch, numbers, batch.items), numbers, False)
        return StreamResult(task.worker, fetched, self.batcher.get_state(), False)


class WorkerStreamsMode(LoaderMode):
    """An IterableDataset over process workers; checkpoint ``{version, epoch, num_workers, turn, exhausted,
    workers, batch_size}``: the round robin's next turn, the ended streams and each worker's stream state after
    its last delivered batch. A resume needs the same ``num_workers`` (the streams are per worker)."""

    VERSION = 1
    VERSION_KEY = "version"
    EPOCH_KEY = WorkerTurns.EPOCH_KEY
    TURN_KEY = WorkerTurns.TURN_KEY
    EXHAUSTED_KEY = WorkerTurns.EXHAUSTED_KEY
    WORKERS_KEY = "workers"
    NUM_WORKERS_KEY = "num_workers"
    BATCH_SIZE_KEY = "batch_size"

    def __init__(self, loader: Any, every: int) -> None:
        n = loader.num_workers
        self.num_workers, self.batch_size, self.persistent = n, loader.batch_size, loader.persistent_workers
        self.drop_last = loader.drop_last
        self.dataset = loader.dataset
        items = ItemBatchFetcher(
            loader.transform, loader._collate, seed=loader.seed, stride=loader.world_size, offset=loader.rank
        )
        self.turns = WorkerTurns(n)
        self.fetcher = StreamFetcher(loader.dataset, loader.batch_size, loader.drop_last, items, n, every)
        self.mapper = fetch_stage(loader, self.turns, self.fetcher)
        self._workers: list[Any] = [None] * n
        self._ended: set[int] = set()

    def next_fn(self, ticks: Any = None) -> Any:
        return self._next

    def _next(self) -> Fetched:
        while True:
            result: StreamResult = self.mapper.next()
            self._workers[result.worker] = result.state
            if result.error is not None:
                raise result.error
            if result.fetched is not None:
                return result.fetched
            self._ended.add(result.worker)
            self.turns.retire(result.worker)

    def read_cursor(self) -> Cursor:
        turns = self.mapper.get_state()[OrderedMapper.SOURCE_KEY]
        exhausted = sorted(set(turns[self.EXHAUSTED_KEY]) | self._ended)  # known at delivery: never asked again
        return {**turns, self.EXHAUSTED_KEY: exhausted, self.WORKERS_KEY: list(self._workers)}

    def carry(self, cursor: Cursor) -> Cursor:
        if not self.persistent or cursor is None:  # torch: new workers start from the loader's copy of the dataset
            return None
        return {self.WORKERS_KEY: [ItemBatcher.next_epoch(s) for s in cursor[self.WORKERS_KEY]]}

    def start_state(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        cursor = cursor or {}
        workers = cursor.get(self.WORKERS_KEY) or [None] * self.num_workers
        self._workers = list(workers)
        self._ended = set()
        self.turns.starts = dict(enumerate(workers))
        turns = {self.EPOCH_KEY: epoch, self.TURN_KEY: cursor.get(self.TURN_KEY, 0)}
        return {OrderedMapper.SOURCE_KEY: turns | {self.EXHAUSTED_KEY: cursor.get(self.EXHAUSTED_KEY, [])}}

    def _items(self) -> int:
        if not hasattr(self.dataset, "__len__"):
            raise TypeError("the number of batches needs an IterableDataset with __len__")
        return len(self.dataset)

    def remaining(self, cursor: Cursor) -> int:
        return self.num_batches()  # torch's estimate: len(dataset) / batch_size, whatever was delivered

    def num_batches(self) -> int:
        n = self._items()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def items_per_epoch(self) -> int:
        return self._items()

    def state_dict(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        cursor = cursor or {}
        return {
            self.VERSION_KEY: self.VERSION,
            self.EPOCH_KEY: epoch,
            self.NUM_WORKERS_KEY: self.num_workers,
            self.TURN_KEY: cursor.get(self.TURN_KEY, 0),
            self.EXHAUSTED_KEY: list(cursor.get(self.EXHAUSTED_KEY, [])),
            self.WORKERS_KEY: list(cursor.get(self.WORKERS_KEY) or [None] * self.num_workers),
            self.BATCH_SIZE_KEY: self.batch_size,
        }

    def parse_state(self, state: Any) -> tuple[int, Cursor]:
        keys = (self.EPOCH_KEY, self.NUM_WORKERS_KEY, self.TURN_KEY, self.EXHAUSTED_KEY, self.WORKERS_KEY)
        if isinstance(state, Mapping) and "node_state" in state and self.WORKERS_KEY not in state:
            raise ValueError(
                "this checkpoint was taken with worker_method='thread' (or num_workers=0): the IterableDataset read "
                f"as one stream; this loader reads one stream per worker process (worker_method='process', "
                f"num_workers={self.num_workers}), so the items differ: resume with worker_method='thread'"
            )
        fields, epoch = StateFields.envelope(
            state, "IterableDataset loader (process workers)", keys, (self.VERSION_KEY, self.VERSION),
            (self.BATCH_SIZE_KEY,)
        )
        n = fields.int(self.NUM_WORKERS_KEY, low=1, high=1 << 20)
        if n != self.num_workers:
            raise ValueError(
                f"this checkpoint holds the streams of num_workers={n} process workers, this loader has "
                f"{self.num_workers}: an IterableDataset's streams are per worker, resume with num_workers={n}"
            )
        turn = fields.int(self.TURN_KEY, high=n - 1)
        workers = fields.get(self.WORKERS_KEY)
        if not isinstance(workers, list) or len(workers) != n:
            raise fields.error(self.WORKERS_KEY, f"must be a list of {n} stream states or None")
        for w, worker in enumerate(workers):
            if worker is not None:
                self.fetcher.batcher.check_state(worker, f"{fields.where(self.WORKERS_KEY)}[{w}]")
        exhausted = fields.ints(self.EXHAUSTED_KEY, high=n - 1, must="(workers whose stream ended)")
        if fields.get(self.BATCH_SIZE_KEY) is not None:
            fields.int(self.BATCH_SIZE_KEY, low=1)
        return epoch, {self.TURN_KEY: turn, self.EXHAUSTED_KEY: exhausted, self.WORKERS_KEY: workers}
