"""Random augmentations against torchvision v2: the same draws from the same seed, the same values.

``torch.manual_seed(s); ours(image)`` must equal ``torch.manual_seed(s); torchvision_v2(image)`` outside a loader
(both draw from ``torch.default_generator`` there), over image modes, dtypes, memory layouts and odd sizes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image as P
from torchvision import tv_tensors
from torchvision.transforms import v2

from torch_drt import transforms as T
from torch_drt.random import item_scope
from torch_drt.transforms._image import plain

Mode = v2.InterpolationMode
MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}
SIZES = [(1, 1), (5, 3), (17, 31), (40, 23), (64, 48)]
SEEDS = range(4)


def make(mode: str, size: tuple[int, int], dtype: torch.dtype = torch.uint8, seed: int = 0) -> T.Image:
    """A random image, HWC memory, of (width, height) ``size``."""
    w, h = size
    arr = np.random.default_rng(seed).integers(0, 256, (h, w, MODES[mode]), dtype=np.uint8)
    image = T.Image.from_array(arr)
    return image if dtype == torch.uint8 else T.ToFloat()(image)


def layouts(image: T.Image) -> list[T.Image]:
    """The image in HWC memory and in CHW memory."""
    return [image, T.ToChw()(image)]


def as_tv(image: T.Image) -> tv_tensors.Image:
    """A torchvision Image of the same values in the same memory layout (a copy).

    torchvision's own results can depend on the memory layout in the last bit of a float (its contrast's luma
    uses fused multiply-adds on contiguous planes only), so the reference is computed on the same layout.
    """
    return tv_tensors.Image(plain(image).clone())


def as_pil(image: T.Image) -> P.Image:
    arr = image.hwc.numpy()
    return P.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else np.ascontiguousarray(arr), list(MODES)[arr.shape[2] - 1])


def same_draws(ours, theirs, image: T.Image, reference, seed: int) -> None:
    """Seeded alike, ours on ``image`` equals theirs on ``reference``, and both leave the generator alike."""
    torch.manual_seed(seed)
    got = ours(image)
    after_ours = torch.rand(1)
    torch.manual_seed(seed)
    want = theirs(reference)
    after_theirs = torch.rand(1)
    if isinstance(want, P.Image):
        want = T.Image.from_array(np.asarray(want))
    assert isinstance(got, T.Image)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.shape, want.shape)
    assert torch.equal(plain(got), plain(want))
    assert torch.equal(after_ours, after_theirs)  # the same number of draws


@pytest.mark.matrix
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(("ours", "theirs"), [
    (T.RandomResizedCrop(24), v2.RandomResizedCrop(24)),
    (T.RandomResizedCrop((13, 7), scale=(0.3, 0.9), ratio=(0.5, 2.0)),
     v2.RandomResizedCrop((13, 7), scale=(0.3, 0.9), ratio=(0.5, 2.0))),
    (T.RandomResizedCrop(9, interpolation="bicubic"), v2.RandomResizedCrop(9, interpolation=Mode.BICUBIC)),
    (T.RandomResizedCrop(11, interpolation="nearest"), v2.RandomResizedCrop(11, interpolation=Mode.NEAREST)),
    (T.RandomResizedCrop(30, interpolation="lanczos3"), v2.RandomResizedCrop(30, interpolation=Mode.LANCZOS)),
])
def test_random_resized_crop(mode, size, ours, theirs):
    image = make(mode, size)
    pillow_values = mode in ("LA", "RGBA") or ours.interpolation in ("nearest", "lanczos3")
    for seed in SEEDS:
        for inp in layouts(image):  # torchvision's tensor values (torch's kernels), or its PIL values (Pillow's)
            same_draws(ours, theirs, inp, as_pil(image) if pillow_values else inp, seed)


@pytest.mark.matrix
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize(("ours", "theirs"), [
    (T.RandomCrop(3), v2.RandomCrop(3)),
    (T.RandomCrop((4, 2), padding=2), v2.RandomCrop((4, 2), padding=2)),
    (T.RandomCrop(6, padding=(1, 3), fill=7), v2.RandomCrop(6, padding=(1, 3), fill=7)),
    (T.RandomCrop(5, padding=(1, 2, 3, 4), padding_mode="edge"),
     v2.RandomCrop(5, padding=(1, 2, 3, 4), padding_mode="edge")),
    (T.RandomCrop(5, padding=2, padding_mode="reflect"), v2.RandomCrop(5, padding=2, padding_mode="reflect")),
    (T.RandomCrop(5, padding=3, padding_mode="symmetric"), v2.RandomCrop(5, padding=3, padding_mode="symmetric")),
    (T.RandomCrop((45, 50), pad_if_needed=True), v2.RandomCrop((45, 50), pad_if_needed=True)),
    (T.RandomCrop(41, padding=1, pad_if_needed=True, fill=9), v2.RandomCrop(41, padding=1, pad_if_needed=True, fill=9)),
])
@pytest.mark.parametrize("size", [(17, 31), (40, 23)])
def test_random_crop(mode, dtype, ours, theirs, size):
    image = make(mode, size, dtype)
    for seed in SEEDS:
        for inp in layouts(image):
            same_draws(ours, theirs, inp, as_tv(inp), seed)


def test_random_crop_larger_than_the_image():
    with pytest.raises(ValueError, match="larger than the"):
        T.RandomCrop(50)(make("RGB", (17, 31)))


@pytest.mark.matrix
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(("ours", "theirs"), [
    (T.RandomHorizontalFlip(), v2.RandomHorizontalFlip()), (T.RandomVerticalFlip(0.3), v2.RandomVerticalFlip(0.3)),
    (T.RandomErasing(p=1.0), v2.RandomErasing(p=1.0)),
    (T.RandomErasing(p=0.7, scale=(0.1, 0.5), value=3), v2.RandomErasing(p=0.7, scale=(0.1, 0.5), value=3)),
    (T.RandomErasing(p=1.0, value="random"), v2.RandomErasing(p=1.0, value="random")),
])
def test_flips_and_erasing(mode, dtype, size, ours, theirs):
    image = make(mode, size, dtype)
    for seed in SEEDS:
        for inp in layouts(image):
            same_draws(ours, theirs, inp, as_tv(inp), seed)


@pytest.mark.parametrize("mode", list(MODES))
def test_erasing_with_a_value_per_channel(mode):
    values = [1.0, 2.0, 3.0, 4.0][: MODES[mode]]
    image = make(mode, (40, 23), torch.float32)
    same_draws(T.RandomErasing(p=1.0, value=values), v2.RandomErasing(p=1.0, value=values), image, as_tv(image), 3)
    with pytest.raises(ValueError, match="5 values"):
        T.RandomErasing(p=1.0, value=[0.0] * 5)(image)


JITTERS = [
    dict(brightness=0.4, contrast=0.4, saturation=0.4),
    dict(brightness=0.8, contrast=0.8, saturation=0.8, hue=0.2),
    dict(brightness=(0.2, 1.8)),
    dict(contrast=(0.0, 2.0)),
    dict(saturation=(0.0, 3.0)),
    dict(hue=0.5),
    dict(),
]


@pytest.mark.matrix
@pytest.mark.parametrize("mode", ["L", "RGB"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kwargs", JITTERS)
def test_color_jitter(mode, dtype, size, kwargs):
    image = make(mode, size, dtype)
    for seed in SEEDS:
        for inp in layouts(image):
            same_draws(T.ColorJitter(**kwargs), v2.ColorJitter(**kwargs), inp, as_tv(inp), seed)


@pytest.mark.matrix
@pytest.mark.parametrize("mode", ["L", "RGB"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("size", SIZES)
def test_random_grayscale(mode, dtype, size):
    image = make(mode, size, dtype)
    for seed in SEEDS:
        for inp in layouts(image):
            same_draws(T.RandomGrayscale(0.5), v2.RandomGrayscale(0.5), inp, as_tv(inp), seed)


@pytest.mark.parametrize("mode", ["LA", "RGBA"])
def test_colour_transforms_refuse_alpha_images_like_torchvision(mode):
    image = make(mode, (17, 31))
    for ours, theirs in ((T.ColorJitter(brightness=0.5), v2.ColorJitter(brightness=0.5)),
                         (T.RandomGrayscale(1.0), v2.RandomGrayscale(1.0))):
        with pytest.raises((TypeError, ValueError)):
            theirs(as_tv(image))
        with pytest.raises(ValueError, match="1 or 3 channels"):
            ours(image)
    assert T.ColorJitter()(image) is image  # no factor: nothing to refuse, like torchvision


def test_random_apply_and_choice():
    image = make("RGB", (40, 23))
    ours_apply = T.RandomApply([T.RandomHorizontalFlip(1.0), T.ColorJitter(0.5, 0.5)], p=0.4)
    theirs_apply = v2.RandomApply([v2.RandomHorizontalFlip(1.0), v2.ColorJitter(0.5, 0.5)], p=0.4)
    ours_choice = T.RandomChoice([T.RandomVerticalFlip(1.0), T.RandomGrayscale(1.0), T.ColorJitter(hue=0.3)],
                                 p=[1, 2, 3])
    theirs_choice = v2.RandomChoice([v2.RandomVerticalFlip(1.0), v2.RandomGrayscale(1.0), v2.ColorJitter(hue=0.3)],
                                    p=[1, 2, 3])
    for seed in range(20):
        same_draws(ours_apply, theirs_apply, image, as_tv(image), seed)
        same_draws(ours_choice, theirs_choice, image, as_tv(image), seed)


def test_a_whole_pipeline_equals_torchvision():
    ours = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                      T.RandomGrayscale(0.2), T.ToFloat(), T.RandomErasing(p=0.5)])
    theirs = v2.Compose([v2.RandomResizedCrop(16), v2.RandomHorizontalFlip(), v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
                         v2.RandomGrayscale(0.2), v2.ToDtype(torch.float32, scale=True), v2.RandomErasing(p=0.5)])
    for seed in range(30):
        image = make("RGB", (40 + seed, 23 + 2 * seed), seed=seed)
        torch.manual_seed(seed)
        got = ours(image)
        torch.manual_seed(seed)
        want = theirs(as_tv(image))
        # ToFloat divides by 255 (ToTensor's values), ToDtype multiplies by 1/255: within one float32 step
        assert torch.allclose(plain(got), plain(want), rtol=0, atol=1e-6)


def test_draws_come_from_the_item_generator():
    image = make("RGB", (40, 23))
    flip_jitter = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1)])

    def run(position: int, seed: int = 5) -> torch.Tensor:
        with item_scope(seed=seed, epoch=1, position=position):
            return plain(flip_jitter(image))

    first = run(7)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    assert torch.equal(run(7), first)  # the same item's draws, whatever the global generator holds
    assert torch.equal(torch.get_rng_state(), state)  # which they leave alone
    others = [run(p) for p in range(6)] + [run(7, seed=6)]
    assert not any(torch.equal(o, first) for o in others)


def test_one_draw_per_call_for_each_coin():
    image = make("RGB", (5, 3))
    for transform in (T.RandomHorizontalFlip(0.0), T.RandomHorizontalFlip(1.0), T.RandomGrayscale(0.0),
                      T.RandomErasing(p=0.0), T.RandomApply([T.HFlip()], p=0.0)):
        torch.manual_seed(0)
        transform(image)
        torch.manual_seed(0)
        torch.rand(1)
        expected = torch.rand(1)
        torch.manual_seed(0)
        transform(image)
        assert torch.equal(torch.rand(1), expected), transform


def test_tuple_items_and_the_loader_hook():
    image = make("RGB", (40, 23))
    flip = T.RandomHorizontalFlip(1.0)
    out, label = flip((image, 3))
    assert label == 3 and torch.equal(plain(out), plain(image).flip(-1))
    assert torch.equal(plain(flip(11, image)), plain(image).flip(-1))  # transform(index, item)
    out, label, extra = T.Compose([T.RandomVerticalFlip(1.0), T.ToFloat()])(5, (image, 1, "x"))
    assert (label, extra) == (1, "x") and out.dtype == torch.float32


@pytest.mark.parametrize(("transform", "message"), [
    (lambda: T.RandomHorizontalFlip(1.5), "p=1.5"),
    (lambda: T.RandomResizedCrop(10, scale=(0.9, 0.1)), "increasing"),
    (lambda: T.ColorJitter(brightness=-1), "non-negative"),
    (lambda: T.ColorJitter(hue=0.7), "hue"),
    (lambda: T.RandomErasing(value="noise"), "random"),
    (lambda: T.RandomChoice([T.HFlip()], p=[1, 2]), "2 weights for 1"),
    (lambda: T.RandomCrop(4, padding_mode="wrap"), "padding_mode"),
])
def test_bad_arguments(transform, message):
    with pytest.raises(ValueError, match=message):
        transform()


def test_random_resized_crop_takes_uint8():
    with pytest.raises(ValueError, match="crop before ToFloat"):
        T.RandomResizedCrop(8)(make("RGB", (17, 31), torch.float32))


@pytest.mark.parametrize(("ours", "theirs"), [
    (T.RandomHorizontalFlip, v2.RandomHorizontalFlip), (T.RandomGrayscale, v2.RandomGrayscale),
])
def test_a_coin_compares_at_float32_like_torchvision(ours, theirs):
    # p just above the draw in double, the draw itself once rounded to float32 (as torch compares a float32 tensor
    # with a Python float): torchvision skips the transform; a comparison of Python floats would apply it
    image = make("RGB", (17, 31))
    for seed in SEEDS:
        torch.manual_seed(seed)
        draw = float(torch.rand(1))
        p = math.nextafter(draw, 1.0)
        assert float(np.float32(p)) == draw < p
        same_draws(ours(p), theirs(p), image, as_tv(image), seed)
        torch.manual_seed(seed)
        assert torch.equal(plain(ours(p)(image)), plain(image))  # skipped, as torchvision skips it


@pytest.mark.parametrize("flip", [T.RandomHorizontalFlip(1.0), T.RandomVerticalFlip(1.0)])
def test_flips_keep_the_memory_layout(flip):
    for image in layouts(make("RGB", (17, 31))):
        out = flip(image)
        assert out.memory_layout == image.memory_layout
        assert torch.equal(plain(out), plain(image).flip(-1 if flip.dim == 1 else -2))
