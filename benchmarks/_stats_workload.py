"""bench_stats_cost.py's workload: the 100,000-ints overhead loader (``_ints_workload.py``), statistics on or off,
and a constant source for the mapper alone."""

from __future__ import annotations

from typing import Any

from _ints_workload import BATCH, Ints, identity
from torchdata.nodes import BaseNode

from torch_drt import StatefulDataLoader


class Constant(BaseNode):
    """A source yielding one item forever (the mapper's own work, without a planner's)."""

    def __init__(self, item: Any) -> None:
        super().__init__()
        self.item = item

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)

    def next(self) -> Any:
        return self.item

    def get_state(self) -> dict:
        return {}


def make_loader(workers: int, stats: bool) -> StatefulDataLoader:
    kwargs = {"num_workers": workers, "persistent_workers": True, "worker_method": "thread"} if workers else {}
    loader = StatefulDataLoader(Ints(), batch_size=BATCH, collate_fn=identity, stats=stats, **kwargs)
    sum(1 for _ in loader)  # warm up: workers started, the mapper settled (inline or not), `every` grown
    return loader
