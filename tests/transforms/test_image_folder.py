"""torch_drt transforms used the torchvision way: ``ImageFolder(root, transform=...)`` over real PNG and JPEG files,
iterated directly, by torch's DataLoader and by torch_drt's StatefulDataLoader, against torchvision v2.

The references are torchvision v2 pipelines that start with ``v2.ToImage()`` (the PIL image as a tensor, which is
what a torch_drt transform takes a PIL image as). Random pipelines draw from torch's global generator wherever no
loader item is current, as torchvision's do, so ``torch.manual_seed(s)`` before either gives the same values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image as P
from torch.utils.data import DataLoader
from torchvision import datasets, tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.functional import to_tensor

from torch_drt import ImageCollator, StatefulDataLoader
from torch_drt import transforms as T
from torch_drt.random import item_scope
from torch_drt.transforms._image import plain

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Two classes, PNG and JPEG files (RGB and grey, odd sizes): 10 images."""
    root = tmp_path_factory.mktemp("image_folder")
    rng = np.random.default_rng(0)
    for k, name in enumerate(("cat", "dog")):
        (root / name).mkdir()
        for i in range(5):
            w, h = 30 + 3 * i + k, 24 + 2 * i
            base = rng.integers(0, 256, (h // 4 + 1, w // 4 + 1, 3), dtype=np.uint8)
            arr = np.asarray(P.fromarray(base).resize((w, h), P.BICUBIC))
            image = P.fromarray(arr).convert("L") if i == 3 else P.fromarray(arr)
            image.save(root / name / f"{i}.{'jpg' if i % 2 else 'png'}", quality=90)
    return root


def to_tensor_values(image: torch.Tensor) -> torch.Tensor:
    """torchvision's ``ToTensor`` on the same uint8 values (what ``ToFloat`` promises)."""
    return to_tensor(plain(image).permute(1, 2, 0).numpy())


def fixed() -> tuple[T.Compose, v2.Compose]:
    """A pipeline without random draws, and torchvision's. ``Decode`` takes the dataset's PIL image (converting it
    as it would decode its file), so the pipeline written for encoded bytes serves ImageFolder as it is."""
    ours = T.Compose([T.Decode(), T.Resize(20), T.CenterCrop(16), T.RandomHorizontalFlip(p=1.0), T.ToFloat(),
                      T.Normalize(MEAN, STD)])
    theirs = v2.Compose([v2.ToImage(), v2.Resize(20), v2.CenterCrop(16), v2.RandomHorizontalFlip(p=1.0),
                         v2.Lambda(to_tensor_values), v2.Normalize(MEAN, STD)])
    return ours, theirs


def random() -> tuple[T.Compose, v2.Compose]:
    """Random augmentations, and torchvision's; the PIL image goes straight in (taken as ``ToImage`` gives it)."""
    ours = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                      T.RandomGrayscale(0.3)])
    theirs = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(16), v2.RandomHorizontalFlip(),
                         v2.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.RandomGrayscale(0.3)])
    return ours, theirs


def mixed() -> tuple[v2.Compose, v2.Compose]:
    """torch_drt transforms inside torchvision's Compose, and torchvision's alone."""
    ours = v2.Compose([T.Decode(), T.RandomResizedCrop(16), v2.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4)])
    theirs = v2.Compose([v2.ToImage(), v2.RandomResizedCrop(16), v2.RandomHorizontalFlip(), v2.ColorJitter(0.4, 0.4)])
    return ours, theirs


def assert_batches_equal(a: list, b: list) -> None:
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(plain(xa), plain(xb)) and torch.equal(ya, yb)


@pytest.mark.parametrize("pipelines", [fixed, random, mixed])
def test_items_equal_torchvision(root, pipelines):
    ours, theirs = pipelines()
    mine, reference = datasets.ImageFolder(str(root), transform=ours), datasets.ImageFolder(str(root), transform=theirs)
    for i in range(len(mine)):
        for seed in range(3):
            torch.manual_seed(seed)
            image, label = mine[i]
            torch.manual_seed(seed)
            want, want_label = reference[i]
            assert isinstance(image, tv_tensors.Image) and label == want_label
            assert image.dtype == want.dtype and torch.equal(plain(image), plain(want)), (i, seed)


def test_random_draws_outside_a_loader_are_torch_global_draws(root):
    ours, _ = random()
    data = datasets.ImageFolder(str(root), transform=ours)
    draws = {plain(data[0][0]).numpy().tobytes() for _ in range(12)}
    assert len(draws) > 1  # random without any seeding, and each call draws anew
    torch.manual_seed(5)
    first = data[0][0]
    torch.manual_seed(5)
    assert torch.equal(plain(first), plain(data[0][0]))


@pytest.mark.parametrize("pipelines", [fixed, random, mixed])
@pytest.mark.parametrize("workers", [0, 2])
def test_torch_dataloader(root, pipelines, workers):
    ours, theirs = pipelines()
    batches = []
    for transform in (ours, theirs):
        torch.manual_seed(3)
        loader = DataLoader(datasets.ImageFolder(str(root), transform=transform), batch_size=4, shuffle=True,
                            num_workers=workers, generator=torch.Generator().manual_seed(1))
        batches.append(list(loader))
    assert_batches_equal(*batches)


@pytest.mark.parametrize("pipelines", [fixed, random, mixed])
def test_torch_drt_loader_on_the_calling_thread(root, pipelines):
    # the transforms run in __getitem__, where no loader item is current: torch's global generator, as
    # torchvision's draw, so both pipelines give the same values from the same torch.manual_seed
    ours, theirs = pipelines()
    batches = []
    for transform in (ours, theirs):
        torch.manual_seed(3)
        loader = StatefulDataLoader(datasets.ImageFolder(str(root), transform=transform), batch_size=4,
                                    shuffle=True, seed=1)
        batches.append(list(loader))
    assert_batches_equal(*batches)


WORKERS = [{"num_workers": 2, "worker_method": "thread"}, {"num_workers": 2, "worker_method": "process"}]


@pytest.mark.parametrize("kwargs", WORKERS)
def test_torch_drt_loader_workers_fixed(root, kwargs):
    ours, theirs = fixed()  # no draws: torchvision's values on any worker
    batches = [list(StatefulDataLoader(datasets.ImageFolder(str(root), transform=t), batch_size=4, seed=1, **kwargs))
               for t in (ours, theirs)]
    assert_batches_equal(*batches)


@pytest.mark.parametrize("kwargs", WORKERS)
def test_torch_drt_loader_workers_random(root, kwargs):
    # from the workers' global generators, as torchvision's transforms draw there (random; in threads, which
    # share torch's generator, not reproducible)
    ours, _ = random()
    loader = StatefulDataLoader(datasets.ImageFolder(str(root), transform=ours), batch_size=10, **kwargs)
    images, labels = next(iter(loader))
    assert images.shape == (10, 3, 16, 16) and images.dtype == torch.uint8 and labels.tolist() == [0] * 5 + [1] * 5


def test_as_the_loader_transform_items_keep_their_own_draws(root):
    # the same pipeline as the loader's transform: each item's draws are keyed by (seed, epoch, position), the same
    # under any number of workers and reproducible with item_scope
    ours, _ = random()
    data = datasets.ImageFolder(str(root))  # (PIL image, label) items
    runs = []
    for kwargs in ({"num_workers": 0}, {"num_workers": 2, "worker_method": "thread"},
                   {"num_workers": 3, "batch_size": 3, "worker_method": "process"}):
        loader = StatefulDataLoader(data, **{"batch_size": 4, **kwargs}, shuffle=True, seed=7, transform=ours,
                                    collate_fn=ImageCollator(), return_indices=True)
        runs.append([(plain(im).clone(), int(i)) for (batch, _), indices in loader for im, i in zip(batch, indices)])
    assert all(len(r) == len(data) for r in runs)
    for run in runs[1:]:
        assert all(torch.equal(a, b) and i == j for (a, i), (b, j) in zip(runs[0], run))
    for position, (image, index) in enumerate(runs[0]):
        with item_scope(seed=7, epoch=0, position=position):
            again, _ = ours(data[index])
        assert torch.equal(plain(again), image)
