"""PipelineLoader: the loader every torch_drt loader is, one pipeline of nodes and stages.

A mode supplies the source node (which batches, in which order), the fetch stage (what loading a batch means)
and the checkpoint format; the rest is shared::

    source node --plan--> OrderedMapper(fetch on threads or processes [-> shared-memory transport]) --Fetched-->
        LoaderIterator (device copy; end of epoch) ---> caller
    LoaderPosition: epoch + the source's state after the last delivered batch; rollover in one place

``torch_drt.StatefulDataLoader`` uses the map-style mode (``BatchPlanner`` + ``BatchFetcher``) or the node mode
(``ItemBatcher`` + ``ItemBatchFetcher``); ``CachedDataset.to_torch_dataloader`` the cache mode (``StreamPlanner``
+ the cache's row fetcher).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataLoader

from torch_drt.describe import described
from torch_drt.loader._autotune import STATE_KEY as AUTOTUNE_KEY
from torch_drt.loader._sampler_view import LoaderShards
from torch_drt.loader._stats_recorder import StatsRecorder, stats_enabled
from torch_drt.loader.iterator import LoaderIterator
from torch_drt.loader.position import Cursor, LoaderPosition
from torch_drt.nodes.ordered_map import OrderedMapper

if TYPE_CHECKING:
    from torch_drt.loader._autotune import LoaderAutotune
    from torch_drt.loader.stats import LoaderStats
    from torch_drt.nodes._inline_loop import Countdown


class LoaderMode:
    """What distinguishes one kind of loader: its pipeline (``mapper``) and its checkpoint format.

    A cursor is the source node's state after the last delivered batch (None: the start of an epoch).
    """

    mapper: OrderedMapper

    def read_cursor(self) -> Cursor:
        """The running pipeline's cursor after the last delivered batch."""
        return self.mapper.get_state()[OrderedMapper.SOURCE_KEY]

    def next_fn(self, ticks: Countdown | None = None) -> Callable[[], Any]:
        """What an iterator calls for the next ``Fetched`` of the running epoch (``StopIteration`` at its end);
        ``ticks``: the statistics' countdown, for a mode whose function is a loop counting it down (``MapMode``)."""
        return self.mapper.next

    def resize(self, num_workers: int, in_flight: int) -> None:
        """Run with ``num_workers`` and ``in_flight`` batches from the next ``mapper.reset()`` on (autotune)."""
        self.mapper.resize(num_workers, in_flight)

    def start_state(self, epoch: int, cursor: Cursor) -> dict[str, Any] | None:
        """The mapper's initial state for ``epoch`` at ``cursor`` (called by ``iter(loader)``)."""
        raise NotImplementedError

    def starting(self, epoch: int, cursor: Cursor) -> None:
        """Called by ``iter(loader)`` just before the pipeline is reset for ``epoch`` at ``cursor``: where a mode
        starts work in this process for the first items of the loading processes that reset forks
        (``mapper.starts_processes()``), so that it is under way while they start."""

    def carry(self, cursor: Cursor) -> Cursor:
        """The cursor the next epoch starts from when an epoch ended at ``cursor`` (None: its plain start)."""
        return None

    def at_end(self, cursor: Cursor) -> bool:
        """Whether ``cursor`` stands at the very end of its epoch."""
        return False

    def remaining(self, cursor: Cursor) -> int:
        """Batches left in the epoch after ``cursor``."""
        raise NotImplementedError

    def num_batches(self) -> int:
        """Batches per epoch on this rank."""
        raise NotImplementedError

    def items_per_epoch(self) -> int:
        """Items per epoch on this rank."""
        raise NotImplementedError

    def epoch_indices(self, epoch: int) -> Iterable[int]:
        """The indices this rank loads in ``epoch``, where the mode can tell them."""
        raise TypeError("this loader's items have no dataset indices to list")

    def state_dict(self, epoch: int, cursor: Cursor) -> dict[str, Any]:
        """The checkpoint of ``(epoch, cursor)``."""
        raise NotImplementedError

    def parse_state(self, state: Any) -> tuple[int, Cursor]:
        """``(epoch, cursor)`` of a checkpoint.

        Raises:
            ValueError: when the state does not describe this loader.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Stop the workers (a later ``iter()`` starts new ones)."""
        self.mapper.close()


class PipelineLoader(_TorchdataLoader):
    """A ``torchdata`` ``StatefulDataLoader`` run by a ``LoaderMode``'s pipeline (see the module docstring).

    Subclasses set the torch attributes (``dataset``, ``batch_size``, ...) and call ``_setup_pipeline``.
    """

    multiprocessing_context: Any = None  # a plain attribute here, not DataLoader's validating property
    rank: int = 0
    world_size: int = 1
    shuffle: bool = False
    seed: int | None = None
    drop_last: bool = False
    return_indices: bool = False
    in_order: bool = True
    _device: Any = None
    _autotune: LoaderAutotune | None = None  # with num_workers/prefetch_depth="auto"

    def _setup_pipeline(self, mode: LoaderMode, stats: bool | None = None) -> None:
        self._mode = mode
        self._stats = StatsRecorder() if stats_enabled(stats) else None
        self._position = LoaderPosition(self._read_cursor, self._carry)
        self._generation = 0
        self.batch_sampler = None

    def _read_cursor(self) -> Cursor:
        return self._mode.read_cursor()

    def _carry(self, cursor: Cursor) -> Cursor:
        return self._mode.carry(cursor)

    @property
    def sampler(self) -> LoaderShards:  # type: ignore[override]
        """This loader's sharding as a ``DistributedSampler`` (what Lightning and Fabric look for)."""
        return LoaderShards(self)

    def _repr_fields(self) -> dict[str, Any]:
        """What ``repr`` shows besides the dataset (subclasses add their settings)."""
        return {"batch_size": getattr(self, "batch_size", None), "num_workers": getattr(self, "num_workers", None)}

    def __repr__(self) -> str:
        fields = self._repr_fields() | {"epoch": self._position.epoch if "_position" in self.__dict__ else None}
        return described(self, getattr(self, "dataset", None), **fields)

    def __len__(self) -> int:
        """This rank's batches per epoch."""
        return self._mode.num_batches()

    def _start_workers(self, epoch: int) -> None:
        """Called before the pipeline is reset for ``epoch``: where a loader (re)configures its workers."""

    def _end_epoch(self) -> None:
        """Called by the iterator once the epoch's last batch was delivered."""

    def __iter__(self) -> LoaderIterator:
        mode = self._mode

        def start(epoch: int, cursor: Cursor) -> None:
            mode.mapper.stats = self._stats  # (a mode built anew for another topology records too)
            self._start_workers(epoch)
            mode.starting(epoch, cursor)
            mode.mapper.reset(mode.start_state(epoch, cursor))

        self._position.begin(mode.at_end, start)
        self._generation += 1
        return LoaderIterator(self, self._generation)

    def stats(self) -> LoaderStats:
        """Where the time went so far: per stage and worker, the caller's waits, bytes read, and a ``verdict()``
        (``torch_drt.loader.stats.LoaderStats``; kept across epochs, resumes and worker restarts).

        Raises:
            RuntimeError: when the loader records no statistics (``stats=False`` or ``TORCH_DRT_STATS=0``).
        """
        if self._stats is None:
            raise RuntimeError("this loader records no statistics (stats=False, or TORCH_DRT_STATS=0)")
        from torch_drt.loader.stats import LoaderStats

        return LoaderStats.of(self._stats, getattr(self, "num_workers", 0) or 0, self._mode.mapper.method)

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable checkpoint of the batches delivered so far (prefetched ones excluded); with
        ``num_workers="auto"`` or ``prefetch_depth="auto"``, the setting chosen too (``"autotune"``)."""
        state = self._mode.state_dict(*self._position.snapshot())
        if self._autotune is not None:
            state[AUTOTUNE_KEY] = self._autotune.state()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume at a checkpoint on the next ``iter()``.

        As torchdata's ``StatefulDataLoader``: an iterator running mid-epoch is dropped (its next ``next()`` raises
        ``RuntimeError``) and the state applies at the next ``iter()``.

        Raises:
            ValueError: when the state does not describe this loader (a running iterator is then left alone).
        """
        epoch, cursor = self._mode.parse_state(state_dict)
        tuned = None
        if self._autotune is not None and isinstance(state_dict, Mapping) and AUTOTUNE_KEY in state_dict:
            tuned = self._autotune.parse(state_dict[AUTOTUNE_KEY])
        if self._position.active:
            self._position.stop()
            self._generation += 1
        self._position.load(epoch, cursor)
        if tuned is not None:
            assert self._autotune is not None  # (it parsed `tuned` above)
            self._autotune.load(self, tuned)

    def close(self) -> None:
        """Stop the workers; the delivered position is kept (a later ``iter()`` starts new workers)."""
        self._position.stop()
        self._mode.close()

    def __enter__(self) -> PipelineLoader:
        """``with loader:`` (guideloom's loaders are context managers): ``close()`` on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            mode = self.__dict__.get("_mode")
            if mode is not None:
                mode.close()
        except Exception:  # interpreter shutdown: nothing left to stop
            pass
