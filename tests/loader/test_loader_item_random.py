"""Each batch is loaded in its batch scope: an item's generator depends on (seed, epoch, position) only (issue 12's
wiring: under any workers, worker method, batch size or world size, and after a resume, items draw the same)."""

from __future__ import annotations

import pytest
import torch

from torch_drt import StatefulDataLoader
from torch_drt.random import item_generator


def noisy(index: int, item: int) -> tuple[int, float]:
    return index, float(torch.rand((), generator=item_generator()))


class Draws:
    """``__getitem__`` draws from the item's generator too (it passes its index)."""

    def __len__(self) -> int:
        return 30

    def __getitem__(self, i: int) -> float:
        return float(torch.rand((), generator=item_generator(i)))


def draws(**kwargs) -> dict[int, float]:
    loader = StatefulDataLoader(list(range(30)), collate_fn=list, transform=noisy, shuffle=True, **kwargs)
    return {i: x for batch in loader for i, x in batch}


def test_an_items_draws_do_not_depend_on_the_topology():
    reference = draws(batch_size=4, seed=5)
    assert len(set(reference.values())) == 30
    assert draws(batch_size=7, seed=5, num_workers=2) == reference
    processes = {"worker_method": "process", "multiprocessing_context": "fork"}
    assert draws(batch_size=3, seed=5, num_workers=2, **processes) == reference
    ranks = [draws(batch_size=2, seed=5, rank=r, world_size=3) for r in range(3)]
    assert {k: v for r in ranks for k, v in r.items()} == reference
    assert draws(batch_size=4, seed=6) != reference  # another seed, other draws


def test_a_resumed_epoch_draws_the_same():
    loader = StatefulDataLoader(list(range(30)), batch_size=4, collate_fn=list, transform=noisy, seed=3)
    full = [x for batch in loader for x in batch]
    second_epoch = [x for batch in loader for x in batch]
    assert second_epoch != full  # the epoch is part of the key
    first = StatefulDataLoader(list(range(30)), batch_size=4, collate_fn=list, transform=noisy, seed=3)
    it = iter(first)
    head = [x for _ in range(3) for x in next(it)]
    resumed = StatefulDataLoader(list(range(30)), batch_size=5, collate_fn=list, transform=noisy, seed=3,
                                 num_workers=2)
    resumed.load_state_dict(first.state_dict())
    assert head + [x for batch in resumed for x in batch] == full


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2}, {"num_workers": 2, "item_concurrency": 3}])
def test_getitem_draws_from_the_same_generator(kwargs):
    a = [x for b in StatefulDataLoader(Draws(), batch_size=4, seed=1, collate_fn=list, **kwargs) for x in b]
    b = [x for b in StatefulDataLoader(Draws(), batch_size=6, seed=1, collate_fn=list) for x in b]
    assert a == b and len(set(a)) == 30


def test_plain_fetch_path_draws_each_positions_own_stream_in_any_thread_and_inside_a_users_scope():
    """The inline fast path (no transform: the batch slot read in C) gives item ``i`` at position ``p`` the stream of
    ``item_seed(seed, epoch, p)``: on the main thread, on a fresh thread, and inside a user's ``batch_scope``."""
    import threading

    from torch_drt.random import batch_scope, item_seed
    from torch_drt.sampling.samplers import ShuffledSampler

    def expected(epoch: int) -> list[float]:
        order = ShuffledSampler(30, 4).indices(epoch, torch.arange(30).numpy()).tolist()
        by_index = {i: float(torch.rand((), generator=torch.Generator().manual_seed(item_seed(4, epoch, p))))
                    for p, i in enumerate(order)}
        return [by_index[i] for i in order]

    def epochs() -> list[list[float]]:
        loader = StatefulDataLoader(Draws(), batch_size=4, seed=4, shuffle=True, collate_fn=list)
        return [[x for b in loader for x in b] for _ in range(2)]

    want = [expected(0), expected(1)]
    assert epochs() == want
    out: list = []
    thread = threading.Thread(target=lambda: out.append(epochs()))
    thread.start()
    thread.join(60)
    assert out == [want]
    with batch_scope(99, 7, [0], [0]):  # a user's scope around the loop: the loader's batches use their own
        assert epochs() == want
