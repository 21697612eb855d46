"""AutotuneRequest: what a ``StatefulDataLoader``'s ``num_workers="auto"`` and ``prefetch_depth="auto"`` ask to
tune, checked up front, and the ``LoaderAutotune`` (``torch_drt.loader._autotune``) that runs the search."""

from __future__ import annotations

import dataclasses
from typing import Any

from torchdata.nodes import BaseNode

from torch_drt.loader._arguments import MAX_WORKERS, is_iterable_dataset
from torch_drt.loader._autotune import LoaderAutotune
from torch_drt.loader._tuner import THREAD_START, Setting

AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class AutotuneRequest:
    """What a ``StatefulDataLoader``'s arguments ask to tune, checked up front (``AutotuneRequest.of``).

    Attributes:
        workers, depth: whether ``num_workers`` / ``prefetch_depth`` are ``"auto"``.
        start: where the search starts: one batch ahead and one process worker or ``THREAD_START`` thread
            workers for what is tuned, the given values otherwise (``prefetch_depth=None``: 2).
        memory_cap: ``autotune_memory_cap``.
    """

    workers: bool
    depth: bool
    start: Setting
    memory_cap: int | None

    @classmethod
    def of(cls, dataset: Any, num_workers: Any, prefetch_depth: Any, prefetch_factor: Any, memory_cap: Any,
           stats: Any, threads: bool = False) -> AutotuneRequest:
        """The request of these arguments (``threads``: the workers are threads).

        Raises:
            ValueError: on ``"auto"`` misspelt, with ``prefetch_factor``, with ``stats=False``, for a stream, on a
                bad ``autotune_memory_cap`` or one given without anything to tune.
        """
        workers, depth = num_workers == AUTO, prefetch_depth == AUTO
        if isinstance(num_workers, str) and not workers:
            raise ValueError(f"{num_workers=} must be an int in [0, {MAX_WORKERS}] or 'auto'")
        if isinstance(prefetch_depth, str) and not depth:
            raise ValueError(f"{prefetch_depth=} must be an int > 0, None or 'auto'")
        if workers and prefetch_factor is not None:
            raise ValueError(
                f"num_workers='auto' changes the workers: give batches ahead as prefetch_depth, not {prefetch_factor=}"
            )
        if depth and prefetch_factor is not None:
            raise ValueError(f"prefetch_depth='auto' tunes the batches loaded ahead: give no {prefetch_factor=}")
        if depth and num_workers == 0:
            raise ValueError("prefetch_depth='auto' loads ahead on workers: it needs num_workers > 0 or 'auto'")
        check_memory_cap(memory_cap, workers or depth, "num_workers='auto' and prefetch_depth='auto'")
        if (workers or depth) and stats is False:
            raise ValueError("num_workers='auto' and prefetch_depth='auto' tune from the loader's statistics: "
                             "stats=False turns them off")
        if (workers or depth) and (isinstance(dataset, BaseNode) or is_iterable_dataset(dataset)):
            raise ValueError(
                "num_workers='auto' and prefetch_depth='auto' tune a map-style dataset's loader (its batches are "
                f"loaded again after a change of workers); give numbers for {type(dataset).__name__}"
            )
        first, ahead = THREAD_START if threads else 1, 2 if prefetch_depth is None else prefetch_depth
        start = Setting(first if workers else num_workers, 1 if depth else ahead)
        return cls(workers, depth, start, memory_cap)

    @property
    def tuning(self) -> bool:
        """Whether anything is tuned."""
        return self.workers or self.depth

    def initial(self, num_workers: Any, prefetch_depth: Any) -> tuple[int, int | None]:
        """The loader's ``num_workers`` and ``prefetch_depth`` to start with (the given ones when not tuned)."""
        return (self.start.workers if self.workers else num_workers,
                self.start.depth if self.depth else prefetch_depth)

    def autotune(self, loader: Any) -> LoaderAutotune | None:
        """The search of ``loader`` (built with ``initial()``'s values), or None when nothing is tuned."""
        if not self.tuning:
            return None
        try:
            epoch_batches: int | None = len(loader)
        except TypeError:  # a sampler without __len__
            epoch_batches = None
        return LoaderAutotune(self.start, self.workers, self.depth, self.memory_cap,
                              loader.worker_method == "process", epoch_batches)


def check_memory_cap(memory_cap: Any, tuning: bool, what: str) -> None:
    """Refuse an ``autotune_memory_cap`` that is not a positive int or None, or one given with nothing to tune
    (``what``: the arguments it bounds).

    Raises:
        ValueError: naming the cap.
    """
    if memory_cap is None:
        return
    if not isinstance(memory_cap, int) or isinstance(memory_cap, bool) or memory_cap < 1:
        raise ValueError(f"autotune_memory_cap={memory_cap!r} must be an int > 0 (bytes) or None")
    if not tuning:
        raise ValueError(f"autotune_memory_cap={memory_cap} bounds {what}: give one")
