"""PIL images in, ``tv_tensors.Image`` out, with torchvision's values: every torch_drt transform, containers included,
and ``Decode``; torchvision v2's several-inputs form ``t(image, target)``."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image as P
from torchvision import tv_tensors
from torchvision.transforms import v2

from torch_drt import transforms as T
from torch_drt.transforms._image import plain


def pil(mode: str = "RGB", size: tuple[int, int] = (23, 17), seed: int = 0) -> P.Image:
    arr = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    return P.fromarray(arr).convert(mode)


PAIRS = [  # (ours, torchvision's on the image as v2.ToImage gives it)
    (T.CenterCrop(9), v2.CenterCrop(9)),
    (T.Pad(2, padding_mode="reflect"), v2.Pad(2, padding_mode="reflect")),
    (T.Resize(11), v2.Resize(11)),
    (T.HFlip(), v2.RandomHorizontalFlip(p=1.0)),
    (T.RandomResizedCrop(8), v2.RandomResizedCrop(8)),
    (T.RandomCrop(8, padding=2), v2.RandomCrop(8, padding=2)),
    (T.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.ColorJitter(0.4, 0.4, 0.4, 0.1)),
    (T.RandomGrayscale(0.5), v2.RandomGrayscale(0.5)),
    (T.RandomErasing(1.0, value=7), v2.RandomErasing(1.0, value=7)),
    (T.RandomApply([T.HFlip()], p=0.5), v2.RandomApply([v2.RandomHorizontalFlip(p=1.0)], p=0.5)),
    (T.RandomChoice([T.HFlip(), T.VFlip()]),
     v2.RandomChoice([v2.RandomHorizontalFlip(p=1.0), v2.RandomVerticalFlip(p=1.0)])),
    (T.Compose([v2.CenterCrop(9)]), v2.CenterCrop(9)),  # only torchvision's steps: still an Image out
    (T.Compose([T.RandomHorizontalFlip(), v2.RandomVerticalFlip()]),
     v2.Compose([v2.RandomHorizontalFlip(), v2.RandomVerticalFlip()])),
]


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=lambda t: type(t).__name__)
def test_a_pil_image_in_gives_torchvisions_image_out(ours, theirs):
    for seed in range(6):
        image = pil(seed=seed)
        torch.manual_seed(seed)
        got = ours(image)
        torch.manual_seed(seed)
        want = v2.Compose([v2.ToImage(), theirs])(image)
        assert isinstance(got, tv_tensors.Image), (seed, type(got))
        assert got.dtype == want.dtype and torch.equal(plain(got), plain(want)), seed


def test_torchvisions_several_inputs_form():
    image = pil()
    ours = v2.Compose([T.RandomHorizontalFlip(p=1.0), v2.ToDtype(torch.float32, scale=True)])
    theirs = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(p=1.0), v2.ToDtype(torch.float32, scale=True)])
    (out, label), (want, want_label) = ours(image, 3), theirs(image, 3)
    assert isinstance(out, tv_tensors.Image) and torch.equal(plain(out), plain(want)) and label == want_label == 3
    boxes = torch.tensor([[1, 2, 3, 4]])
    out, same = T.RandomCrop(8)(T.Image.from_array(np.asarray(image)), boxes)
    assert out.shape == (3, 8, 8) and same is boxes
    # the loader's hook form is kept: an int index first
    mirrored = v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(p=1.0)])(image)
    assert torch.equal(plain(T.HFlip()(5, image)), plain(mirrored))


def encoded(image: P.Image, fmt: str = "PNG", **kwargs) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


@pytest.mark.parametrize(("image", "fmt"), [
    (pil("RGB"), "PNG"), (pil("L"), "PNG"), (pil("LA"), "PNG"), (pil("RGBA"), "PNG"), (pil("1"), "PNG"),
    (pil("P"), "PNG"), (pil("RGB"), "JPEG"), (pil("CMYK"), "TIFF"),
])
def test_decode_takes_pil_images_as_it_decodes_their_bytes(image, fmt):
    data = encoded(image, fmt)
    want = T.Decode()(data)
    for opened in (P.open(io.BytesIO(data)), P.open(io.BytesIO(data)).copy()):  # lazy, and loaded
        got = T.Decode()(opened)
        assert isinstance(got, T.Image) and got.memory_layout == want.memory_layout
        assert torch.equal(plain(got), plain(want))
    palette = P.open(io.BytesIO(encoded(pil("P"), transparency=0)))
    assert T.Decode()(palette).shape[0] == 4  # palette with transparency: RGBA, as decoded


def test_decode_refuses_pil_images_it_refuses_as_bytes():
    deep = P.fromarray(np.full((4, 5), 1000, np.uint16))
    with pytest.raises(ValueError, match="16-bit samples refused"):
        T.Decode()(deep)
    with pytest.raises(ValueError, match="over Decode's limits"):
        T.Decode(max_width=10)(pil(size=(11, 3)))
    with pytest.raises(TypeError, match="Decode takes encoded bytes or a PIL image, got int"):
        T.Decode()(3)


def test_other_transforms_take_pil_images_as_to_image_gives_them():
    with pytest.raises(TypeError, match="a PIL image of mode '1'"):  # ToImage gives a bool tensor: never converted
        T.HFlip()(pil("1"))
    palette = pil("P")
    assert torch.equal(plain(T.HFlip()(palette)), plain(v2.Compose([v2.ToImage(), v2.RandomHorizontalFlip(1.0)])(
        palette)))  # the indices, as ToImage gives them (Decode converts to RGB instead)
