"""The fused ToFloat + Normalize + ToChw step recycles its results' buffers: only once nothing holds a result."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from torch_drt import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def image(h: int, w: int, seed: int) -> T.Image:
    return T.Image.from_array(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def one_by_one(steps: list, x: T.Image) -> torch.Tensor:
    for step in steps:  # each on its own: no fusing, no recycling
        x = step(x)
    return x.as_subclass(torch.Tensor)


def fused(pad: T.PadTo | None = None) -> tuple[T.Compose, list]:
    steps = ([pad] if pad else []) + [T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()]
    compose = T.Compose(steps)
    assert type(compose._steps[0].__self__).__name__ == "FloatNormalizeChw"
    return compose, steps


@pytest.mark.parametrize("pad", [None, T.PadTo(24, 24)])
def test_a_held_result_is_never_written_again(pad):
    compose, _ = fused(pad)
    first = compose(image(24, 24, 0))
    kept = first.clone()
    view, array = first[1:], np.asarray(first)  # a view and an array: each holds the memory on its own
    del first
    for seed in range(1, 4):
        compose(image(24, 24, seed))
    assert torch.equal(view, kept[1:])
    assert np.array_equal(array, kept.numpy())
    del view
    for seed in range(4, 7):
        compose(image(24, 24, seed))
    assert np.array_equal(array, kept.numpy())


def test_a_freed_result_is_used_again():
    compose, _ = fused()
    first = compose(image(16, 16, 0))
    ptr = first.data_ptr()
    second = compose(image(16, 16, 1))
    assert second.data_ptr() != ptr  # the first is still held
    del first
    third = compose(image(16, 16, 2))
    assert third.data_ptr() == ptr


def test_a_result_moved_to_shared_memory_is_never_used_again():
    compose, _ = fused()
    first = compose(image(16, 16, 0))
    first.share_memory_()  # what pickling it to another process does: the receiver maps this memory
    shared = first.data_ptr()
    del first
    for seed in range(1, 5):
        assert compose(image(16, 16, seed)).data_ptr() != shared


@pytest.mark.parametrize("anchor", ["top_left", "center"])
def test_padding_is_rewritten_in_a_recycled_buffer(anchor):
    pad = T.PadTo(30, 28, fill=7, anchor=anchor)
    compose, steps = fused(pad)
    sizes = [(28, 30), (5, 9), (28, 3), (2, 30), (17, 11)]  # each reuses the buffer the previous one left
    for seed, (h, w) in enumerate(sizes):
        x = image(h, w, seed)
        assert torch.equal(compose(x).as_subclass(torch.Tensor), one_by_one(steps, x)), (h, w)


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda c: pickle.loads(pickle.dumps(c))])
def test_a_copy_has_its_own_buffers(clone):
    compose, steps = fused(T.PadTo(20, 20))
    compose(image(20, 20, 0))
    other = clone(compose)
    a = compose(image(20, 20, 1))
    b = other(image(12, 20, 2))
    del a
    c = other(image(20, 20, 3))
    assert torch.equal(b.as_subclass(torch.Tensor), one_by_one(steps, image(12, 20, 2)))
    assert torch.equal(c.as_subclass(torch.Tensor), one_by_one(steps, image(20, 20, 3)))
