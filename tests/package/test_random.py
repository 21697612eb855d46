"""Per-item randomness: a pure function of (seed, epoch, position), reachable from __getitem__ and transforms."""

from __future__ import annotations

import threading

import pytest
import torch

from torch_drt.random import batch_scope, item_generator, item_numpy_generator, item_scope, item_seed


def test_item_seed_is_pure_and_distinct() -> None:
    assert item_seed(1, 0, 5) == item_seed(1, 0, 5)
    seeds = {item_seed(s, e, p) for s in (0, 1) for e in (0, 1) for p in range(100)}
    assert len(seeds) == 400
    assert all(0 <= s < 1 << 63 for s in seeds)


def test_outside_a_loader_is_torch_default_generator() -> None:
    assert item_generator() is torch.default_generator
    torch.manual_seed(3)
    a = torch.rand(3, generator=item_generator())
    torch.manual_seed(3)
    assert torch.equal(a, torch.rand(3))


def test_getitem_and_transform_share_one_stream() -> None:
    with batch_scope(9, 2, [10, 11], [100, 101]):
        g = item_generator(11)
        first = torch.rand(1, generator=g)
        with item_scope(position=101):
            assert item_generator() is g
            second = torch.rand(1, generator=item_generator())
    ref = torch.Generator().manual_seed(item_seed(9, 2, 101))
    assert torch.equal(torch.cat([first, second]), torch.rand(2, generator=ref))


def test_same_position_same_values_in_any_batch_and_thread() -> None:
    def draw(indices: list[int], positions: list[int], index: int) -> torch.Tensor:
        with batch_scope(5, 0, indices, positions):
            return torch.rand(4, generator=item_generator(index))

    a = draw([7, 8, 9], [0, 1, 2], 8)
    b = draw([8], [1], 8)
    out = []
    t = threading.Thread(target=lambda: out.append(draw([3, 8], [40, 1], 8)))
    t.start()
    t.join()
    assert torch.equal(a, b) and torch.equal(a, out[0])
    assert not torch.equal(a, draw([8], [2], 8))


def test_repeated_index_takes_positions_in_call_order() -> None:
    with batch_scope(1, 0, [4, 4, 5], [10, 11, 12]):
        g1, g2 = item_generator(4), item_generator(4)
    assert g1 is not g2
    assert g1.initial_seed() == item_seed(1, 0, 10) and g2.initial_seed() == item_seed(1, 0, 11)


def test_errors_are_clear() -> None:
    with batch_scope(1, 0, [4], [10]):
        with pytest.raises(RuntimeError, match="needs the index"):
            item_generator()
        with pytest.raises(LookupError, match="index 99"):
            item_generator(99)
    with pytest.raises(ValueError, match="seed= and epoch="), item_scope(position=3):
        pass


def test_item_scope_alone_reproduces_an_item() -> None:
    with item_scope(seed=7, epoch=1, position=3):
        a = item_numpy_generator().random(3)
    with item_scope(seed=7, epoch=1, position=3):
        b = item_numpy_generator().random(3)
    with item_scope(seed=7, epoch=1, position=4):
        c = item_numpy_generator().random(3)
    assert (a == b).all() and not (a == c).all()


def test_map_items_without_indices_calls_a_one_argument_fn_in_each_items_scope() -> None:
    from torch_drt.random import map_items

    def fn(item: str) -> tuple[str, int]:
        return item, item_generator().initial_seed()

    with batch_scope(3, 1, [5, 6], [20, 21]):
        assert map_items(fn, None, ["a", "b"], [20, 21]) == [("a", item_seed(3, 1, 20)), ("b", item_seed(3, 1, 21))]
        with pytest.raises(RuntimeError, match="needs the index"):
            item_generator()  # no item scope left behind


def test_map_items_scopes_each_item_and_leaves_the_scope_after_the_batch_or_an_error() -> None:
    import contextvars

    from torch_drt.random import map_items

    seen, copies = [], []

    def fn(index: int, item: str) -> str:
        seen.append((index, item_generator().initial_seed()))
        copies.append(contextvars.copy_context())  # a context copied during an item keeps that item
        if item == "boom":
            raise ValueError(item)
        return item * 2

    with batch_scope(3, 1, [5, 6, 7], [20, 21, 22]):
        assert map_items(fn, [5, 6, 7], ["a", "b", "c"], [20, 21, 22]) == ["aa", "bb", "cc"]
        with pytest.raises(RuntimeError, match="needs the index"):
            item_generator()  # no item scope left behind
        with item_scope(position=21):
            with pytest.raises(ValueError, match="boom"):
                map_items(fn, [5, 7], ["x", "boom"], [20, 22])
            assert item_generator().initial_seed() == item_seed(3, 1, 21)  # the enclosing item's scope is back
    assert seen == [(i, item_seed(3, 1, p)) for i, p in [(5, 20), (6, 21), (7, 22), (5, 20), (7, 22)]]
    with batch_scope(3, 1, [5, 6, 7], [20, 21, 22]):
        assert [c.run(lambda: item_generator().initial_seed()) for c in copies[:3]] == [
            item_seed(3, 1, p) for p in (20, 21, 22)
        ]
