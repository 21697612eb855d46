"""``to_torch_dataloader(verbose=True)``: dataset-rt 0.4.8's loader events, through standard logging.

Each event is one INFO record ``event=NAME key=value ...`` on the loader's logger (``torch_drt.cache.loader``, or
``dataset_rt.loader`` for ``torch_drt.compat.dataset_rt``). When that logger has no handler (nor its ancestors; the
``NullHandler`` torch_drt installs does not count) and its level allows INFO, the record is printed to stderr as
``[logger] message`` by a handler that is not kept, as dataset-rt does, so configuring logging later never
duplicates output.

Events: ``loader_ready`` (the parent, once the loader is built), ``reader_empty`` (a consumer without samples),
``reader_started`` (a consumer's stream starts or restarts in the process that loads it) and ``reader_pass`` (a
consumer begins a pass).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from torch_drt.cache.rows import stream_id
from torch_drt.nodes.stream_plan import StreamBatch
from torch_drt.sampling.budget import ConsumerPlan, first_positions

_READER_EVENT = (
    "event=%s pid=%s rank=%s worker=%s seed=%s native_threads=%s persistent=%s samples=%s population=%s "
    "sampling_reset=%s stream=%s"
)


_READY_EVENT = (
    "event=loader_ready pid=%s rank=%s seed=%s streams=%s num_workers=%s native_threads_per_consumer=%s "
    "partition=%s persistent=%s prefetch_factor=%s native_prefetch=%s samples=%s samples_per_rank=%s "
    "batch_size=%s world_size=%s shuffle=%s multiprocessing_context=%s"
)


def _handled(logger: logging.Logger) -> bool:
    """Whether a handler other than a ``NullHandler`` (torch_drt's library default) would see its records."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(not isinstance(h, logging.NullHandler) for h in current.handlers):
            return True
        current = current.parent if current.propagate else None
    return False


def loader_event(logger_name: str, message: str, *args: Any) -> None:
    """Log ``message % args`` at INFO on ``logger_name`` (stderr when nothing handles that logger)."""
    logger = logging.getLogger(logger_name)
    if _handled(logger):
        logger.info(message, *args)
        return
    if logger.level != logging.NOTSET and not logger.isEnabledFor(logging.INFO):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    try:
        handler.handle(logger.makeRecord(logger_name, logging.INFO, "", 0, message, args, None))
    finally:
        handler.close()


def log_ready(logger: str, loader: Any, plans: tuple[ConsumerPlan, ...], native_prefetch: int) -> None:
    """The ``loader_ready`` event of a built cache loader (its resolved settings)."""
    context = loader.multiprocessing_context
    # fmt: off
    loader_event(logger, _READY_EVENT, os.getpid(), loader.rank, loader.seed,
                 ",".join(f"{p.worker}:{stream_id(p, len(plans))}" for p in plans), loader.num_workers,
                 loader.native_num_workers, loader.worker_partition, loader.persistent_workers,
                 "disabled" if loader.prefetch_factor is None else loader.prefetch_factor, native_prefetch,
                 loader.samples_per_epoch, sum(p.sample_count for p in plans), loader.batch_size, loader.world_size,
                 loader.shuffle, "disabled" if context is None else context.get_start_method())
    # fmt: on


class ReaderEvents:
    """The consumers' events, emitted where their batches are loaded (picklable: it travels to the processes).

    Args:
        logger_name: the logger.
        plans: this rank's consumer plans.
        seed: the loader's seed.
        native_threads: reader threads per consumer.
        persistent: whether streams continue across passes (else every pass restarts them).
        inline: batches are loaded in the training process (``worker=main``).
    """

    def __init__(
        self,
        logger_name: str,
        plans: tuple[ConsumerPlan, ...],
        *,
        seed: int,
        native_threads: int,
        persistent: bool,
        inline: bool,
    ) -> None:
        self.logger_name, self.plans, self.seed = logger_name, plans, seed
        self.native_threads, self.persistent, self.inline = native_threads, persistent, inline
        self._firsts = first_positions(plans)
        self._started: set[tuple[int, int]] = set()  # (pid, consumer)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_started": set()}

    def _emit(self, event: str, consumer: int, reset: bool, worker: int | None = None) -> None:
        plan = self.plans[consumer]
        loader_event(
            self.logger_name,
            _READER_EVENT,
            event,
            os.getpid(),
            plan.rank,
            "main" if self.inline else consumer if worker is None else worker,
            self.seed,
            self.native_threads if plan.sample_count else 0,
            self.persistent,
            plan.sample_count,
            plan.population_size,
            reset,
            stream_id(plan, len(self.plans)),
        )

    def empty(self) -> None:
        """``reader_empty`` for each consumer without samples (they never load a batch)."""
        for worker, plan in enumerate(self.plans):
            if plan.sample_count == 0:
                self._emit("reader_empty", worker, False)

    def on_batch(self, batch: StreamBatch, consumer: int) -> None:
        """``reader_started`` / ``reader_pass`` when ``batch`` is the first of its consumer's (``consumer``) pass,
        reported by the process that loads it (``batch.worker``)."""
        if batch.positions.start != self._firsts[consumer]:
            return
        key = (os.getpid(), consumer)
        if key not in self._started or not self.persistent:
            self._started.add(key)
            self._emit("reader_started", consumer, True, batch.worker)
        self._emit("reader_pass", consumer, False, batch.worker)
