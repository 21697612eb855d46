"""LoaderAutotune: ``num_workers="auto"`` and ``prefetch_depth="auto"`` on a ``StatefulDataLoader``.

The loader starts with one batch ahead and one process worker, or ``THREAD_START`` thread workers. Each batch
delivered is counted and timed here (``delivered``): after a warm-up (a first round that carries a start), a trial
(``trial_batches``) measures the setting's steady batches per second (``TrialClock``: the batches in flight over
the mean time a measured batch spent in flight) over ``1 / PLANNED_TRIALS`` of the search's budget, at least a round
of the pipeline (``in_flight`` batches) and ``MIN_TRIAL``: the longer the epoch, the longer each trial and the less
a moment of load sways it; one longer than an epoch goes on in the next (``TrialClock.restart``). It measures the
caller's share of waiting (``loader.stats()``), the largest batch's bytes and process workers' memory
(``worker_bytes``: what each holds or may come to own of what it shares with the parent). The
``HillClimb`` (``torch_drt.loader._tuner``) proposes the next setting, which the loader applies from the delivered
position (the batches in flight are loaded again by the new workers: the data is the same). The search settles
when it stops paying, or after ``BUDGET_SHARE`` of an epoch (at least ``MIN_BUDGET`` batches; it starts no trial
that the batches left cannot finish, but a resumed search's first trial may be cut short). The chosen setting,
whether the search settled, the memory measured and the cap are kept in ``state_dict()["autotune"]``.

A resume is exact and the cap holds: the cap in force is the resumed loader's ``autotune_memory_cap`` when one is
given, else the checkpoint's (a default cap, half the memory available, is decided once, when the tuned run
started, not again at each resume). The checkpoint's setting runs as saved (a settled search is not run again, an
unsettled one goes on from it) when it fits that cap by the memory the checkpoint measured, which it always does
under the checkpoint's own cap; only a smaller cap given to the resumed loader can rule it out, and then it is
shrunk until it fits (batches ahead first, then workers), with a warning. The data is the same either way.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from time import perf_counter_ns
from typing import Any

from torch_drt._state_fields import StateFields
from torch_drt.loader._arguments import MAX_WORKERS
from torch_drt.loader._memory import batch_bytes, default_memory_cap, worker_bytes
from torch_drt.loader._tuner import MIN_BUDGET, HillClimb, MemoryModel, Setting, Trial, TrialClock

STATE_KEY = "autotune"
BUDGET_SHARE = 0.05
MAX_DEPTH = 16
MAX_TUNED_WORKERS = 64  # the search's ceiling: threads (I/O waits; the cap bounds them); processes 4 per CPU, >= 8


@dataclasses.dataclass(frozen=True)
class Resumed:
    """A checkpoint's ``state["autotune"]``, checked: the setting, whether its search had settled, its cap (None
    in states from before it was kept) and the memory it measured."""

    setting: Setting
    done: bool
    memory_cap: int | None
    batch_bytes: int
    worker_bytes: int


class LoaderAutotune:
    """One loader's search and its chosen setting (see the module docstring).

    Args:
        start: the first setting (a fixed ``num_workers`` or ``prefetch_depth`` stays as given).
        tune_workers, tune_depth: what to search.
        memory_cap: the cap in bytes (None: ``default_memory_cap()``, or a resumed checkpoint's cap).
        processes: whether the workers are processes (their memory is measured).
        epoch_batches: batches per epoch, when known (the search's budget).

    Attributes:
        measure: ``measure(loader, batch, setting, batches, elapsed_ns) -> Trial``: what a trial measured (a test
            may put a cost model here).
    """

    def __init__(self, start: Setting, tune_workers: bool, tune_depth: bool, memory_cap: int | None,
                 processes: bool, epoch_batches: int | None) -> None:
        self.cap = default_memory_cap() if memory_cap is None else memory_cap
        self.cap_given = memory_cap is not None  # else a checkpoint's cap replaces the default one
        self.tune_workers, self.tune_depth, self.processes = tune_workers, tune_depth, processes
        most = max(8, 4 * (os.cpu_count() or 1)) if processes else MAX_TUNED_WORKERS
        max_workers = min(MAX_TUNED_WORKERS, most) if tune_workers else start.workers
        self.budget = None if epoch_batches is None else max(MIN_BUDGET, int(epoch_batches * BUDGET_SHARE))
        self.climb = HillClimb(start, MemoryModel(self.cap, processes), max_workers, MAX_DEPTH if tune_depth else
                               start.depth, tune_workers, tune_depth, self.budget)
        self.measure = self._measured
        self.batches = 0  # delivered while searching
        self._begin()

    @property
    def setting(self) -> Setting:
        """The setting to run now (the chosen one once ``done``)."""
        return self.climb.current

    @property
    def done(self) -> bool:
        """Whether the search settled."""
        return self.climb.done

    def _begin(self, loader: Any = None, started: bool = False) -> None:
        """A new trial of ``setting``, its pipeline started now (``started``: with the loader's): warm-up first
        (none: ``loader``'s statistics are marked now), then the measured batches."""
        self._trial = TrialClock(self.setting, perf_counter_ns(), self.budget, not self.processes, started)
        self._mark = self._recorded(loader) if loader is not None and not self._trial.warmup else (0, 0)

    def started(self, loader: Any) -> None:
        """The loader's pipeline starts afresh (a new iterator): the trial running starts again with it, or, once
        some of its batches were delivered (an epoch shorter than a trial), goes on after a warm-up round."""
        if self._trial.count:
            self._trial.restart(perf_counter_ns())
        else:
            self._begin(loader, started=True)

    def delivered(self, loader: Any, batch: Any) -> None:
        """A batch was delivered to the caller: count it; at a trial's end, or once the budget is spent, apply
        the next setting (the best one measured, when the search ends)."""
        self.batches += 1
        trial = self._trial
        trial.delivered(perf_counter_ns())
        before, ends = self.setting, trial.ends
        if self.budget is not None and self.batches >= self.budget and not ends:
            self.settle()  # the trial running is cut short: its setting was not measured to pay
        elif trial.count == trial.warmup:
            self._mark = self._recorded(loader)
            return
        elif not ends:
            return
        else:
            measured = self.measure(loader, batch, self.setting, trial.length, trial.elapsed_ns)
            self.climb.observe(measured, None if self.budget is None else self.budget - self.batches)
        if self.setting != before:
            apply_setting(loader, self.setting)
        self._begin(loader)

    def settle(self) -> None:
        """End the search at the best setting measured."""
        self.climb.settle()

    def _recorded(self, loader: Any) -> tuple[int, int]:
        stats = loader._stats
        stats.flush()
        return stats.wall_ns, stats.wait_ns

    def _measured(self, loader: Any, batch: Any, setting: Setting, batches: int, elapsed_ns: int) -> Trial:
        wall, wait = self._recorded(loader)
        wall, wait = wall - self._mark[0], wait - self._mark[1]
        workers = sum(map(worker_bytes, loader._mode.mapper.worker_pids())) if self.processes else 0
        return Trial(
            throughput=batches * 1e9 / max(1, elapsed_ns),
            wait_share=min(1.0, wait / wall) if wall > 0 else 1.0,
            batch_bytes=batch_bytes(batch),
            worker_bytes=workers // max(1, setting.workers) if workers else 0,
        )

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps: the setting running (the chosen one once ``done``), and the memory model."""
        memory = self.climb.memory
        return {"num_workers": self.setting.workers, "prefetch_depth": self.setting.depth, "done": self.done,
                "memory_cap": self.cap, "batch_bytes": memory.batch_bytes, "worker_bytes": memory.worker_bytes}

    def parse(self, state: Any) -> Resumed:
        """What a checkpoint's ``state["autotune"]`` says.

        Raises:
            ValueError: naming the field that does not describe an autotuned setting.
        """
        fields = StateFields(state, "autotune", path=f"state[{STATE_KEY!r}]", keys=("num_workers", "prefetch_depth"))
        workers = fields.int("num_workers", low=1, high=MAX_WORKERS)
        depth = fields.int("prefetch_depth", low=1, high=1 << 16)
        done = fields.bool("done", default=False)
        cap = fields.optional_int("memory_cap", low=1, high=1 << 62, default=None)
        batch, worker = (fields.int(key, low=0, high=1 << 62, default=0) for key in ("batch_bytes", "worker_bytes"))
        return Resumed(Setting(workers, depth), done, cap, batch, worker)

    def load(self, loader: Any, resumed: Resumed) -> None:
        """Run a checkpoint's setting under the cap in force (see the module docstring): as chosen when its search
        had settled, else the search goes on from it."""
        setting = resumed.setting
        if not self.tune_workers:
            setting = Setting(self.setting.workers, setting.depth)
        if not self.tune_depth:
            setting = Setting(setting.workers, self.setting.depth)
        if not self.cap_given and resumed.memory_cap is not None:
            self.cap = resumed.memory_cap
        memory = MemoryModel(self.cap, self.processes, resumed.batch_bytes, resumed.worker_bytes)
        self.climb = HillClimb(setting, memory, self.climb.max_workers, self.climb.max_depth, self.tune_workers,
                               self.tune_depth, self.budget)
        if resumed.done:
            self.climb.settle()
        if self.setting != setting:
            warnings.warn(
                f"the checkpoint's num_workers={setting.workers}, prefetch_depth={setting.depth} hold about "
                f"{memory.estimate(setting):,} bytes by the memory it measured, over autotune_memory_cap="
                f"{self.cap:,}: resumed with num_workers={self.setting.workers}, prefetch_depth="
                f"{self.setting.depth} (the data is the same)",
                UserWarning,
                stacklevel=3,
            )
        self.batches = 0
        self._begin()
        apply_setting(loader, self.setting)


def apply_setting(loader: Any, setting: Setting) -> None:
    """Run ``loader`` with ``setting`` from now on: a running epoch goes on from its delivered position (the
    batches in flight are dropped and loaded again by the new workers)."""
    from torch_drt.loader._fetch_stage import item_threads

    loader.num_workers, loader.prefetch_depth = setting.workers, setting.depth
    mode, position = loader._mode, loader._position
    cursor = position.cursor() if position.active else None
    mode.resize(setting.workers, loader.in_flight)
    threads = getattr(getattr(mode, "fetcher", None), "item_threads", None)  # a map-style fetcher's item threads
    if threads is not None and threads != item_threads(loader):
        mode.fetcher.close_items()
        mode.fetcher.item_threads = item_threads(loader)
    if position.active:
        loader._start_workers(position.epoch)
        mode.mapper.reset(mode.start_state(position.epoch, cursor))
