"""Issue 12 item 6: a bare torchvision transform (or any one-argument callable) as ``transform=`` gets the item;
one rule, in ``torch_drt.loader.transform_hook``, decides how the loader calls a transform."""

from __future__ import annotations

import functools

import pytest
import torch
from torchvision import transforms as v1
from torchvision.transforms import v2

from torch_drt import StatefulDataLoader
from torch_drt import transforms as T
from torch_drt.loader import transform_hook
from torch_drt.loader.transform_rule import takes_item_only


def images(n: int = 6) -> list[tuple[torch.Tensor, int]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randint(0, 256, (3, 10, 12), dtype=torch.uint8, generator=g), i % 3) for i in range(n)]


class Doubles(torch.nn.Module):
    def forward(self, x):
        return x * 2


def pair(index, item):
    return index, item


def with_extra(index, item, extra=0):
    return index, item


def var(*args):
    return args


def keyword_tail(item, *, scale=1):
    return item


def three(a, b, c):
    return a


@pytest.mark.parametrize(("transform", "item_only"), [
    (v2.Compose([v2.RandomHorizontalFlip()]), True),  # an nn.Module whose forward(*inputs) takes two
    (v2.ToDtype(torch.float32, scale=True), True),
    (v1.Compose([v1.CenterCrop(4)]), True),  # torchvision v1 Compose: __call__(self, img)
    (T.Compose([T.RandomHorizontalFlip()]), True),
    (Doubles(), True),
    (lambda x: x, True),
    (keyword_tail, True),
    (pair, False),
    (with_extra, False),
    (var, False),
    (functools.partial(with_extra, extra=1), False),
    (three, False),  # neither: called as (index, item) and its TypeError says why
])
def test_the_rule(transform, item_only):
    assert takes_item_only(transform) is item_only
    hook = transform_hook(transform)
    assert (hook is transform) is not item_only


def test_a_transform_must_be_callable():
    with pytest.raises(TypeError, match="transform must be callable"):
        StatefulDataLoader([1, 2], transform=3)


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2}, {"num_workers": 2, "multiprocessing_context": "spawn"}],
                         ids=["0-workers", "2-threads", "2-processes"])
def test_a_bare_torchvision_v2_compose_gets_the_item(kwargs):
    augment = v2.Compose([v2.CenterCrop(8), v2.ToDtype(torch.float32, scale=True)])
    loader = StatefulDataLoader(images(), batch_size=3, transform=augment, **kwargs)
    batches = list(loader)
    assert len(batches) == 2
    pictures, labels = batches[0]
    assert pictures.shape == (3, 3, 8, 8) and pictures.dtype == torch.float32
    assert labels.tolist() == [0, 1, 2]
    expected = torch.stack([augment(img) for img, _ in images()[:3]])
    assert torch.equal(pictures, expected)
    loader.close()


def test_a_one_argument_function_and_a_two_argument_function():
    assert list(StatefulDataLoader([1, 2, 3], batch_size=3, transform=lambda x: x * 10, collate_fn=list)) == [
        [10, 20, 30]
    ]
    assert list(StatefulDataLoader([1, 2, 3], batch_size=3, transform=pair, collate_fn=list)) == [
        [(0, 1), (1, 2), (2, 3)]
    ]
