"""Issue 12 item 2: IterableDataset as torch iterates it (process workers: one stream each, get_worker_info
sharding; threads: one stream), and torchdata's Stateful protocol saved in the loader's checkpoint and restored."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from torch_drt import StatefulDataLoader
from torch_drt.random import item_generator

FORK = {"worker_method": "process", "multiprocessing_context": "fork"}
THREADS = {"worker_method": "thread"}
TOPOLOGIES = [{}, {"num_workers": 2, **THREADS}, {"num_workers": 2, **FORK}]
IDS = ["0-workers", "2-threads", "2-processes"]


class Sharded(IterableDataset):
    """Splits its range by torch's worker info, as torch's docs show."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))


class Uneven(IterableDataset):
    """Worker w yields ``sizes[w]`` items (w * 100 + j)."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes

    def __iter__(self):
        info = get_worker_info()
        w = 0 if info is None else info.id
        return iter(range(w * 100, w * 100 + self.sizes[w]))


class Counter(IterableDataset):
    """Stateful: the dataset keeps its position and its own epoch count."""

    def __init__(self, n: int) -> None:
        self.n, self.i, self.epoch, self.saves = n, 0, 0, 0

    def __iter__(self):
        if self.i >= self.n:  # a new epoch
            self.i, self.epoch = 0, self.epoch + 1
        while self.i < self.n:
            self.i += 1
            yield self.epoch * 1000 + self.i - 1

    def state_dict(self) -> dict:
        self.saves += 1
        return {"i": self.i, "epoch": self.epoch}

    def load_state_dict(self, state: dict) -> None:
        self.i, self.epoch = state["i"], state["epoch"]


class StatefulIterator:
    def __init__(self, n: int) -> None:
        self.n, self.i = n, 0

    def __iter__(self):
        return self

    def __next__(self) -> int:
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i - 1

    def state_dict(self) -> dict:
        return {"i": self.i}

    def load_state_dict(self, state: dict) -> None:
        self.i = state["i"]


class IteratorState(IterableDataset):
    """Not Stateful itself: its iterator is."""

    def __iter__(self):
        return StatefulIterator(11)


class Plain(IterableDataset):
    """Neither the dataset nor its iterator is Stateful: a resume replays and skips."""

    def __iter__(self):
        return iter(range(11))


def batches(loader) -> list[list[int]]:
    return [b.tolist() for b in loader]


@pytest.mark.parametrize("dataset", [Sharded(11), Uneven([1, 7]), Uneven([5, 0]), Plain()],
                         ids=["sharded", "uneven-1-7", "uneven-5-0", "plain"])
def test_process_workers_deliver_what_torchs_loader_delivers(dataset):
    theirs = [b.tolist() for b in DataLoader(dataset, batch_size=3, num_workers=2, multiprocessing_context="fork")]
    ours = StatefulDataLoader(dataset, batch_size=3, num_workers=2, **FORK)
    assert batches(ours) == theirs
    assert batches(ours) == theirs  # and again next epoch
    ours.close()


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, **THREADS}], ids=["0-workers", "2-threads"])
def test_thread_workers_iterate_one_stream_as_num_workers_0(kwargs):
    loader = StatefulDataLoader(Sharded(11), batch_size=3, drop_last=True, **kwargs)
    assert batches(loader) == [b.tolist() for b in DataLoader(Sharded(11), batch_size=3, drop_last=True)]
    assert len(loader) == len(DataLoader(Sharded(11), batch_size=3, drop_last=True)) == 3  # from len(dataset)


@pytest.mark.parametrize("kwargs", TOPOLOGIES, ids=IDS)
@pytest.mark.parametrize("make", [lambda: Counter(11), IteratorState, Plain], ids=["dataset", "iterator", "plain"])
def test_a_mid_epoch_checkpoint_resumes_the_streams(make, kwargs):
    full = batches(StatefulDataLoader(make(), batch_size=2, **kwargs))
    first = StatefulDataLoader(make(), batch_size=2, **kwargs)
    it = iter(first)
    head = [next(it).tolist() for _ in range(3)]
    state = first.state_dict()
    first.close()
    resumed = StatefulDataLoader(make(), batch_size=2, **kwargs)
    resumed.load_state_dict(state)
    assert head + batches(resumed) == full
    resumed.close()


def test_the_datasets_state_dict_is_in_the_checkpoint():
    dataset = Counter(10)
    loader = StatefulDataLoader(dataset, batch_size=4)
    it = iter(loader)
    next(it)
    assert loader.state_dict()["node_state"]["source"]["dataset"] == {"i": 4, "epoch": 0}


def test_a_checkpoint_at_the_end_of_an_epoch_keeps_the_datasets_own_state():
    loader = StatefulDataLoader(Counter(4), batch_size=2)
    assert batches(loader) == [[0, 1], [2, 3]]
    resumed = StatefulDataLoader(Counter(4), batch_size=2)
    resumed.load_state_dict(loader.state_dict())
    assert batches(resumed) == batches(loader) == [[1000, 1001], [1002, 1003]]  # the dataset's epoch 1


def test_persistent_process_workers_keep_their_copys_state_across_a_resume():
    kwargs = {"batch_size": 2, "num_workers": 2, "persistent_workers": True, **FORK}
    loader = StatefulDataLoader(Counter(4), **kwargs)
    batches(loader)
    resumed = StatefulDataLoader(Counter(4), **kwargs)
    resumed.load_state_dict(loader.state_dict())
    assert batches(resumed) == batches(loader)  # each worker's copy in its epoch 1
    assert sorted(x for b in batches(resumed) for x in b) == [2000, 2000, 2001, 2001, 2002, 2002, 2003, 2003]
    loader.close()
    resumed.close()


@pytest.mark.parametrize(("every", "saves"), [(1, 5), (3, 2)])
def test_snapshot_every_n_steps_sets_how_often_the_state_is_taken(every, saves):
    dataset = Counter(24)
    loader = StatefulDataLoader(dataset, batch_size=2, snapshot_every_n_steps=every)
    it = iter(loader)
    head = [next(it).tolist() for _ in range(5)]
    assert dataset.saves == saves  # one as each batch starts, or every third
    state = loader.state_dict()
    resumed = StatefulDataLoader(Counter(24), batch_size=2, snapshot_every_n_steps=every)
    resumed.load_state_dict(state)  # between snapshots: the items since are skipped
    assert head + batches(resumed) == [[i, i + 1] for i in range(0, 24, 2)]


def test_process_streams_resume_only_with_the_same_workers():
    loader = StatefulDataLoader(Counter(8), batch_size=2, num_workers=2, **FORK)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    loader.close()
    other = StatefulDataLoader(Counter(8), batch_size=2, num_workers=3, **FORK)
    with pytest.raises(ValueError, match="resume with num_workers=2"):
        other.load_state_dict(state)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"shuffle": True}, "expected unspecified shuffle option"),
    ({"sampler": [0, 1]}, "expected unspecified sampler option"),
    ({"batch_sampler": [[0, 1]]}, "expected unspecified batch_sampler option"),
])
def test_order_arguments_are_refused_as_torch_refuses_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StatefulDataLoader(Plain(), **kwargs)
    with pytest.raises(ValueError, match=message):
        DataLoader(Plain(), **kwargs)


def draw(number: int, item: int) -> tuple[int, int, float]:
    return number, item, float(torch.rand((), generator=item_generator()))


def test_items_draw_from_their_own_generators():
    def run(**kwargs):
        loader = StatefulDataLoader(Plain(), batch_size=3, seed=4, transform=draw, collate_fn=list, **kwargs)
        return [x for b in loader for x in b]

    reference = run()
    assert [n for n, _, _ in reference] == list(range(11)) and len({d for _, _, d in reference}) == 11
    assert run(num_workers=3, **THREADS) == reference  # one stream: the same numbers and draws
    ranks = [run(rank=r, world_size=2) for r in range(2)]
    assert [n for n, _, _ in ranks[1]] == [2 * i + 1 for i in range(11)]  # numbered per rank
    processes = run(num_workers=2, **FORK)  # each worker's copy yields the whole stream, as in torch
    assert sorted(n for n, _, _ in processes) == list(range(22)) and len({d for _, _, d in processes}) == 22
