"""Differential checks against torch's DataLoader: the same script, only the import changed, gets the same data.

Each case here is a divergence a differential fuzzer found (torch's ``DataLoader`` and ``StatefulDataLoader`` built
with the same arguments, their batches compared); both loaders run side by side, with real workers where they
matter.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from torch_drt import StatefulDataLoader


def batches(loader, epochs=1):
    return [[b.tolist() if isinstance(b, torch.Tensor) else b for b in loader] for _ in range(epochs)]


class Tagged(Dataset):
    """``__getitems__`` tags its items: torch calls it only when it batches."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i

    def __getitems__(self, indices):
        return [("many", i) for i in indices]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_without_batching_getitem_is_called_not_getitems(num_workers):
    for loader in (DataLoader, StatefulDataLoader):
        assert batches(loader(Tagged(), batch_size=None, num_workers=num_workers)) == [[0, 1, 2, 3]]
    assert batches(StatefulDataLoader(Tagged(), batch_size=2, collate_fn=list)) == [[[("many", 0), ("many", 1)],
                                                                                     [("many", 2), ("many", 3)]]]


class TupleItems(Tagged):
    def __getitems__(self, indices):
        return tuple(indices)


class _Proxy:
    """A transparent proxy: ``isinstance`` sees the wrapped object's class (``__class__``), ``type()`` the proxy's."""

    def __init__(self, obj):
        object.__setattr__(self, "_obj", obj)

    @property
    def __class__(self):
        return type(self._obj)

    def __iter__(self):
        return iter(self._obj)

    def __len__(self):
        return len(self._obj)

    def __getitem__(self, i):
        return self._obj[i]


class ProxiedItems(Tagged):
    """``__getitems__`` returns a proxy of a list for the first batch, then a proxy of a generator."""

    calls = 0

    def __getitems__(self, indices):
        ProxiedItems.calls += 1
        return _Proxy(list(indices) if ProxiedItems.calls == 1 else (i for i in indices))


def test_each_getitems_result_is_checked_to_be_a_sequence_by_its_class():
    """A proxy of a list is a sequence, a proxy of a generator is made a list: the check is per object, not cached
    by ``type()`` (a proxy's type is the same for both)."""
    loader = StatefulDataLoader(ProxiedItems(), batch_size=2, collate_fn=list)
    assert [list(b) for b in loader][:2] == [[0, 1], [2, 3]]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_getitems_result_reaches_collate_as_it_is_as_in_torch(num_workers):
    """torch hands ``__getitems__``'s sequence to ``collate_fn`` without making a list of it."""
    kinds = {}
    for loader in (DataLoader, StatefulDataLoader):
        kind = loader(TupleItems(), batch_size=2, num_workers=num_workers, collate_fn=lambda b: type(b).__name__)
        kinds[loader.__name__] = batches(kind)
    assert kinds["StatefulDataLoader"] == kinds["DataLoader"] == [["tuple", "tuple"]]


def test_without_batching_the_collate_fn_attribute_is_torchs():
    """torch's ``loader.collate_fn`` without batching is the function given, else ``default_convert``: calling it
    on an item converts that item (it must not take the item's first element)."""
    for collate_fn in (None, torch.as_tensor):
        ours = StatefulDataLoader(Tagged(), batch_size=None, collate_fn=collate_fn)
        theirs = DataLoader(Tagged(), batch_size=None, collate_fn=collate_fn)
        assert ours.collate_fn is theirs.collate_fn
        mine, its = ours.collate_fn([5, 6]), theirs.collate_fn([5, 6])
        assert type(mine) is type(its) and torch.equal(torch.as_tensor(mine), torch.as_tensor(its))
        assert len(mine) == 2  # the item converted, not its first element
    rebuilt = StatefulDataLoader(Tagged(), batch_size=None, collate_fn=ours.collate_fn)  # as Lightning re-creates
    assert "collate_fn" not in repr(StatefulDataLoader(Tagged(), batch_size=None))  # the default is not shown
    batched = StatefulDataLoader(Tagged(), batch_size=2, collate_fn=torch.utils.data.default_convert)
    assert "collate_fn=default_convert" in repr(batched)  # not the default when batching
    assert batches(rebuilt) == batches(DataLoader(Tagged(), batch_size=None, collate_fn=torch.as_tensor))


@pytest.mark.parametrize(("size", "batch_size"), [(0, 1), (3, 4)])
def test_drop_last_with_fewer_items_than_a_batch_is_an_empty_loader(size, batch_size):
    for loader_class in (DataLoader, StatefulDataLoader):
        loader = loader_class(list(range(size)), batch_size=batch_size, drop_last=True)
        assert len(loader) == 0 and batches(loader, 2) == [[], []]


def test_shuffle_over_an_empty_dataset_is_refused_as_torch_refuses_it():
    for loader_class in (DataLoader, StatefulDataLoader):
        with pytest.raises(ValueError, match="num_samples should be a positive integer value, but got num_samples=0"):
            loader_class([], shuffle=True)
    assert batches(StatefulDataLoader([], batch_size=2), 2) == [[], []]  # (unshuffled: empty epochs, as torch's)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_user_samplers_generator_advances_as_in_torch_epoch_after_epoch(num_workers):
    """torch reads a sampler until it ends; RandomSampler draws once more from its generator at that point, so the
    next epoch's order depends on it."""
    def run(loader_class):
        sampler = RandomSampler(range(6), generator=torch.Generator().manual_seed(7))
        return batches(loader_class(list(range(6)), batch_size=4, sampler=sampler, num_workers=num_workers), 3)

    assert run(StatefulDataLoader) == run(DataLoader)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_user_batch_samplers_generator_advances_as_in_torch(num_workers):
    """torch reads a batch sampler until it ends; with drop_last, BatchSampler ends after its last batch, and the
    RandomSampler inside draws once more then."""
    def run(loader_class):
        sampler = BatchSampler(RandomSampler(range(6), generator=torch.Generator().manual_seed(7)), 3, True)
        return batches(loader_class(list(range(6)), batch_sampler=sampler, num_workers=num_workers), 3)

    assert run(StatefulDataLoader) == run(DataLoader)


class Overlong:
    """A sampler that yields more indices than its ``__len__`` says: torch loads every one."""

    def __len__(self):
        return 3

    def __iter__(self):
        return iter([4, 3, 2, 1, 0])


def test_a_sampler_is_read_to_its_end_as_in_torch():
    for loader_class in (DataLoader, StatefulDataLoader):
        loader = loader_class(list(range(5)), batch_size=2, sampler=Overlong())
        assert len(loader) == 2 and batches(loader, 2) == [[[4, 3], [2, 1], [0]]] * 2


@pytest.mark.parametrize("kwargs", [
    {}, {"shuffle": True}, {"num_workers": 1}, {"num_workers": 1, "persistent_workers": True, "shuffle": True},
    {"sampler": RandomSampler(range(6))}, {"drop_last": True, "batch_size": 4},
], ids=["plain", "shuffle", "workers", "persistent-shuffle", "random-sampler", "drop-last"])
def test_the_global_generator_moves_as_with_torch(kwargs):
    """torch's loader draws nothing when built, then a base seed at each iter() (and RandomSampler's seed when it
    shuffles): a model built after the loader, and the draws in the loop, get the same numbers."""
    def run(loader_class):
        torch.manual_seed(0)
        loader = loader_class(list(range(6)), **({"batch_size": 2} | kwargs))
        draws, orders = [torch.rand(()).item()], []
        for _ in range(2):
            batch_list = [b.tolist() for b in loader]
            orders.append(batch_list if "shuffle" not in kwargs else sorted(x for b in batch_list for x in b))
            draws.append(torch.rand(()).item())
        return draws, orders

    assert run(StatefulDataLoader) == run(DataLoader)


def test_the_loaders_generator_moves_as_with_torch():
    def run(loader_class):
        generator = torch.Generator().manual_seed(3)
        loader = loader_class(list(range(6)), batch_size=2, generator=generator)
        states = [generator.get_state()]
        for _ in range(2):
            list(loader)
            states.append(generator.get_state())
        return [s.tolist() for s in states]

    assert run(StatefulDataLoader) == run(DataLoader)



def test_torchs_argument_errors_come_first_over_an_empty_dataset():
    for loader_class in (DataLoader, StatefulDataLoader):
        with pytest.raises(ValueError, match="batch_size=None option disables auto-batching"):
            loader_class([], batch_size=None, drop_last=True, shuffle=True)


def _order(loader) -> list[int]:
    return [int(x) for batch in loader for x in batch]


def test_two_shuffled_loaders_built_in_a_row_take_other_orders_as_torchs_do():
    """torch takes a shuffled loader's order from the global generator at its iter(): two loaders built one after
    the other, nothing drawn between them, still shuffle differently (their iter()s draw one after the other)."""
    for loader_class in (DataLoader, StatefulDataLoader):
        torch.manual_seed(0)
        a, b = (loader_class(list(range(64)), batch_size=8, shuffle=True) for _ in range(2))
        assert _order(a) != _order(b), loader_class


def test_the_order_is_taken_at_the_first_iter_and_a_checkpoint_taken_before_it_resumes_it():
    def first_epoch(draw_between: bool, checkpoint: bool = False):
        torch.manual_seed(0)
        loader = StatefulDataLoader(list(range(64)), batch_size=8, shuffle=True)
        state = loader.state_dict() if checkpoint else None
        if draw_between:
            torch.rand(3)  # e.g. a model's initialisation, after the loader was built
        return _order(loader), state

    assert first_epoch(False)[0] == first_epoch(False)[0]  # a seeded script is reproducible
    assert first_epoch(True)[0] == first_epoch(True)[0]
    assert first_epoch(True)[0] != first_epoch(False)[0]  # the generator's state at iter() decides, as in torch
    order, state = first_epoch(True, checkpoint=True)  # a checkpoint fixes the seed it records
    resumed = StatefulDataLoader(list(range(64)), batch_size=8, shuffle=True)
    resumed.load_state_dict(state)
    assert _order(resumed) == order


def test_a_split_shuffled_without_seed_where_the_ranks_cannot_be_asked_warns():
    """rank= / world_size= without a process group of that shape: the ranks' generators must agree, and the loader
    says so (their shares overlap otherwise); a seed= silences it, and one rank (or no shuffle) needs nothing."""
    loader = StatefulDataLoader(list(range(8)), batch_size=2, shuffle=True, rank=1, world_size=2)
    with pytest.warns(UserWarning, match="without seed=: each rank draws"):
        iter(loader)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kwargs in ({"seed": 3}, {"world_size": 1}, {"shuffle": False}):
            list(StatefulDataLoader(list(range(8)), batch_size=2, **({"shuffle": True, "rank": 0, "world_size": 2}
                                                                        | kwargs)))
