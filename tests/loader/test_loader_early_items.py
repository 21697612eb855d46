"""A sync dataset's items with thread workers and item_concurrency > 1 start as their batch is submitted
(``torch_drt.loader._early_items``): the item threads go on with the next batch's items while a batch waits on its
slowest one; order, errors, state and resumes stay those of torch's DataLoader."""

from __future__ import annotations

import threading

import pytest
from torch.utils.data import DataLoader

from torch_drt import StatefulDataLoader

THREADS = {"num_workers": 1, "item_concurrency": 2, "worker_method": "thread"}


class WaitsForTheNextBatch:
    """Item 1 (batch 0's second) returns only once item 2 (batch 1's first) has started: with one worker, that
    happens only if batch 1's items start before the worker is done with batch 0."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.started = threading.Event()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == 2:
            self.started.set()
        if i == 1 and not self.started.wait(10):  # (a guard against a hang: the test fails instead)
            raise TimeoutError("item 2 did not start while item 1 waited")
        return i * 10


class Plain:
    def __init__(self, n: int, fail: frozenset[int] = frozenset()) -> None:
        self.n, self.fail = n, fail

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i in self.fail:
            raise KeyError(f"bad item {i}")
        return i * 10


def test_the_next_batchs_items_start_while_a_batch_waits_on_its_slowest_item():
    loader = StatefulDataLoader(WaitsForTheNextBatch(8), batch_size=2, collate_fn=list, **THREADS)
    assert list(loader) == list(DataLoader(Plain(8), batch_size=2, collate_fn=list))


@pytest.mark.parametrize("shuffle", [False, True])
def test_order_matches_torch_over_epochs(shuffle):
    kwargs = {"batch_size": 3, "collate_fn": list, "shuffle": shuffle}
    ours = StatefulDataLoader(Plain(20), seed=4, num_workers=2, item_concurrency=4, worker_method="thread", **kwargs)
    for _ in range(2):
        got = list(ours)
        assert sorted(x for b in got for x in b) == [i * 10 for i in range(20)]
        if not shuffle:
            assert got == list(DataLoader(Plain(20), **kwargs))


def test_an_item_error_is_raised_for_its_batch_and_the_next_batch_follows():
    it = iter(StatefulDataLoader(Plain(10, frozenset({3})), batch_size=2, collate_fn=list, **THREADS))
    assert next(it) == [0, 10]
    with pytest.raises(KeyError, match="bad item 3"):
        next(it)
    assert list(it) == [[40, 50], [60, 70], [80, 90]]


def test_a_break_drops_the_begun_items_and_the_state_resumes_exactly():
    loader = StatefulDataLoader(Plain(20), batch_size=2, collate_fn=list, prefetch_factor=4, **THREADS)
    it = iter(loader)
    head = [next(it), next(it)]
    state = loader.state_dict()
    fetcher = loader._mode.fetcher
    assert len(fetcher._early) > 0  # the batches submitted ahead have begun
    del it
    resumed = StatefulDataLoader(Plain(20), batch_size=2, collate_fn=list, **THREADS)
    resumed.load_state_dict(state)
    assert head + list(resumed) == list(DataLoader(Plain(20), batch_size=2, collate_fn=list))
    assert list(loader) == list(DataLoader(Plain(20), batch_size=2, collate_fn=list))  # a new epoch: dropped first
    assert len(fetcher._early) == 0
