"""The torchrun engine: ranks split the parts, rank 0 shows the progress and publishes the set.

Every collective runs on a gloo group of its own (so an NCCL default group works too). While the ranks write,
a heartbeat thread on each rank sums the rows done across ranks a few times a second (one all-reduce), which is
how rank 0's single bar follows the whole build; the heartbeat ends when every rank is done, which is also the
barrier before rank 0 publishes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist

from torch_drt.build._workers import write_parts
from torch_drt.build.lifecycle import finish_build, start_build
from torch_drt.build.plan import PartPlan
from torch_drt.build.progress import BuildProgress
from torch_drt.build.report import BuildReport
from torch_drt.cache import RemoteConfig, WriterConfig
from torch_drt.sampling.stride import owns
from torch_drt.sampling.topology import resolve_topology


class Ranks:
    """This process's place in the job, with a gloo group for the build's collectives."""

    def __init__(self) -> None:
        self.rank, self.world = resolve_topology()
        # a group of every rank: this one is a member (never GroupMember.NON_GROUP_MEMBER)
        self.group = cast("dist.ProcessGroup", dist.new_group(backend="gloo"))

    @classmethod
    def current(cls) -> Ranks | None:
        """The job's ranks when torch.distributed is initialized with more than one rank, else None."""
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return cls()
        return None

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self.group, 0), group=self.group)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def close(self) -> None:
        """Release the build's group."""
        dist.destroy_process_group(self.group)


class _Heartbeat(threading.Thread):
    """Sums the ranks' row counts every ``INTERVAL`` seconds until every rank has finished."""

    INTERVAL = 0.25

    def __init__(self, ranks: Ranks, on_total: Callable[[int], None]) -> None:
        super().__init__(name="torch_drt-build-heartbeat", daemon=True)
        self._ranks = ranks
        self._on_total = on_total
        self._lock = threading.Lock()
        self._rows = 0
        self.finished = threading.Event()
        self.error: BaseException | None = None

    def add(self, n: int) -> None:
        with self._lock:
            self._rows += n

    def run(self) -> None:
        try:
            while True:
                self.finished.wait(self.INTERVAL)
                counts = torch.tensor([self._rows, int(self.finished.is_set())], dtype=torch.int64)
                dist.all_reduce(counts, group=self._ranks.group)
                self._on_total(int(counts[0]))
                if int(counts[1]) == self._ranks.world:
                    return
        except BaseException as e:  # a rank died: the gather after the join reports it too
            self.error = e


def build_on_ranks(
    ranks: Ranks,
    plan: Sequence[PartPlan],
    root: str | Path,
    name: str,
    config: WriterConfig,
    exist_ok: bool,
    storage_options: Mapping[str, Any] | None = None,
    remote_config: RemoteConfig | None = None,
    workers: Mapping[str, Any] | None = None,
) -> BuildReport:
    """Build the set across the job's ranks (each writing its parts with ``workers``: ``write_parts``' worker
    settings); every rank returns the same report.

    Raises:
        ValueError: when the ranks planned different parts, or as ``start_build``.
        FileExistsError: as ``start_build``.
    """
    plans = ranks.gather([p.describe() for p in plan])
    if (other := next((r for r, p in enumerate(plans) if p != plans[0]), None)) is not None:
        raise ValueError(f"rank {other} planned other parts than rank 0: every rank must pass the same inputs")
    start: Any = None
    if ranks.rank == 0:
        try:
            start = start_build(
                root, name, plan, exist_ok=exist_ok, verify=config.validate_cache, storage_options=storage_options,
                remote_config=remote_config,
            )
        except (FileExistsError, ValueError) as e:
            start = e
    start = ranks.broadcast(start)
    if isinstance(start, Exception):
        raise start
    if start.complete is not None:
        return start.complete
    todo = [p for p in plan if p.index not in start.done]
    known = [p.rows for p in plan]
    total = sum(r or 0 for r in known) if None not in known else None
    reused = sum(plan[i].rows or 0 for i in start.done)
    bar = BuildProgress(name, total, enabled=config.show_progress and ranks.rank == 0)
    heartbeat = _Heartbeat(ranks, lambda rows: bar.set(reused + rows))
    heartbeat.start()
    try:
        mine = write_parts(
            [p for i, p in enumerate(todo) if owns(i, rank=ranks.rank, world_size=ranks.world)], start.set_dir,
            config, heartbeat.add, start.remote, **(workers or {}),
        )
    finally:
        heartbeat.finished.set()
        heartbeat.join()
        bar.close()
    outcomes = [o for rank_outcomes in ranks.gather(mine) for o in rank_outcomes]
    report = finish_build(start, name, [*start.done.values(), *outcomes]) if ranks.rank == 0 else None
    return ranks.broadcast(report)
