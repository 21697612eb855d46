"""RandomHorizontalFlip and RandomVerticalFlip with torchvision v2's draws."""

from __future__ import annotations

from typing import Any

import torch

from torch_drt.transforms import _draw
from torch_drt.transforms._image import MAX_ALLOC, Image, as_image, check_alloc, check_max_alloc, plain
from torch_drt.transforms.base import Transform


class _RandomFlip(Transform):
    dim = 1  # of (H, W, C)

    def __init__(self, p: float = 0.5, max_alloc: int = MAX_ALLOC) -> None:
        self.p = _draw.check_p(p)
        self.max_alloc = check_max_alloc(max_alloc)

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        if not _draw.coin(self.p, _draw.generator()):
            return image
        chw = plain(image)
        check_alloc(type(self).__name__, chw.numel() * chw.element_size(), self.max_alloc)
        return torch.flip(chw, dims=(self.dim + 1,)).as_subclass(Image)  # one copy, in the input's memory layout


class RandomHorizontalFlip(_RandomFlip):
    """torchvision v2 ``RandomHorizontalFlip(p)``: mirror left-right when ``torch.rand(1) < p`` (item's generator)."""

    dim = 1


class RandomVerticalFlip(_RandomFlip):
    """torchvision v2 ``RandomVerticalFlip(p)``: mirror top-bottom when ``torch.rand(1) < p`` (item's generator)."""

    dim = 0
