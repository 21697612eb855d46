"""StreamPlanner: the source node of the cache loader, yielding consumers' stream batches in torch's order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from torchdata.nodes import BaseNode

from torch_drt.describe import described
from torch_drt.sampling.budget import ConsumerPlan, batch_counts, first_positions, interleave


class StreamBatch(NamedTuple):
    """One batch of one consumer's stream.

    Attributes:
        epoch: the pass it belongs to.
        number: its number in the pass, in delivery order.
        worker: the consumer (loading worker) whose stream it is; it is loaded on that worker process.
        index: its number among its consumer's batches of the pass.
        start: the stream position of its first item.
        count: its items.
        positions: the items' positions in the pass over all ranks and consumers.
        last: whether it is the pass's last batch.
    """

    epoch: int
    number: int
    worker: int
    index: int  # type: ignore[assignment]  # a field shadowing tuple.index (python/mypy#5380); renaming it is an API change
    start: int
    count: int  # type: ignore[assignment]  # a field shadowing tuple.count (python/mypy#3950)
    positions: range
    last: bool


def consumer_batch(plan: ConsumerPlan, batch_size: int, epoch: int, k: int, continue_streams: bool) -> tuple[int, int]:
    """``(start, count)``: the stream position and size of batch ``k`` of ``plan``'s consumer in pass ``epoch``.

    A stream continues from pass to pass (pass ``p`` starts at ``p * sample_count``) unless ``continue_streams``
    is False, when every pass repeats the first.
    """
    first = k * batch_size
    count = min(batch_size, plan.sample_count - first)
    return (epoch * plan.sample_count if continue_streams else 0) + first, count


class StreamPlanner(BaseNode[StreamBatch]):
    """Walks one pass of a rank's consumers: batch ``k`` of consumer ``w`` in torch's round-robin order.

    Consumer ``w`` yields ``plans[w].sample_count`` items per pass in batches of ``batch_size`` (see
    ``consumer_batch``). The state is ``{epoch, batches_done}``, O(1) to resume.

    Args:
        plans: this rank's consumer plans (``torch_drt.sampling.budget.consumer_plans``).
        batch_size: items per batch.
        continue_streams: streams continue across passes (persistent consumers).
    """

    EPOCH_KEY = "epoch"
    DONE_KEY = "batches_done"

    def __init__(self, plans: tuple[ConsumerPlan, ...], batch_size: int, continue_streams: bool = True) -> None:
        super().__init__()
        self.plans, self.batch_size, self.continue_streams = plans, batch_size, continue_streams
        self.counts = batch_counts(plans, batch_size)
        self.total = sum(self.counts)
        self._bases = first_positions(plans)
        self.epoch = 0
        self.done = 0
        self._order: Iterator[tuple[int, int]] = iter(())

    def __len__(self) -> int:
        """Batches per pass."""
        return self.total

    def __repr__(self) -> str:
        return described(self, consumers=len(self.counts), batches=self.total)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        state = initial_state or {}
        self.epoch = int(state.get(self.EPOCH_KEY, 0))
        self.done = int(state.get(self.DONE_KEY, 0))
        self._order = interleave(self.counts, self.done)

    def next(self) -> StreamBatch:
        worker, k = next(self._order)
        start, count = consumer_batch(self.plans[worker], self.batch_size, self.epoch, k, self.continue_streams)
        base = self._bases[worker] + k * self.batch_size
        number = self.done
        self.done += 1
        positions = range(base, base + count)
        return StreamBatch(self.epoch, number, worker, k, start, count, positions, self.done == self.total)

    def get_state(self) -> dict[str, Any]:
        return {self.EPOCH_KEY: self.epoch, self.DONE_KEY: self.done}

    def state_before(self, batch: StreamBatch) -> dict[str, Any]:
        """The state whose next batch is ``batch``."""
        return {self.EPOCH_KEY: batch.epoch, self.DONE_KEY: batch.number}
