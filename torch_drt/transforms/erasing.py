"""RandomErasing with torchvision v2's parameters and values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torch_drt.transforms import _draw
from torch_drt.transforms._image import MAX_ALLOC, Image, as_image, check_alloc, check_max_alloc, plain
from torch_drt.transforms.base import Transform


class RandomErasing(Transform):
    """torchvision v2 ``RandomErasing``: with probability ``p``, a box of random area (``scale`` of the image's)
    and aspect ratio (log-uniform in ``ratio``) set to ``value``, drawn like torchvision from the item's generator.
    Images of either dtype (torchvision applies it to float images after ``Normalize``, usually).

    Args:
        p: probability of erasing.
        scale: bounds of the box's area, as fractions of the image's.
        ratio: bounds of the box's aspect ratio.
        value: one value, one per channel, or ``"random"`` for standard normal values per pixel (assigned to
            the image's dtype as torchvision assigns them).
        inplace: write into the input instead of a copy.
        max_alloc: the most bytes the copy may allocate.
    """

    def __init__(
        self,
        p: float = 0.5,
        scale: Sequence[float] = (0.02, 0.33),
        ratio: Sequence[float] = (0.3, 3.3),
        value: float | Sequence[float] | str = 0.0,
        inplace: bool = False,
        max_alloc: int = MAX_ALLOC,
    ) -> None:
        self.p = _draw.check_p(p)
        if len(scale) != 2 or len(ratio) != 2 or scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError(f"{scale=} and {ratio=} must be increasing (min, max) pairs")
        if scale[0] < 0 or scale[1] > 1 or ratio[0] <= 0:
            raise ValueError(f"{scale=} must be within [0, 1] and {ratio=} > 0")
        if isinstance(value, str) and value != "random":
            raise ValueError(f"{value=} must be a number, a sequence of numbers or 'random'")
        self.scale, self.ratio = (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1]))
        self.value = value if isinstance(value, str) else [float(v) for v in (value if isinstance(value, Sequence)
                                                                              else [value])]
        self.inplace = inplace
        self.max_alloc = check_max_alloc(max_alloc)
        self._log_ratio = _draw.log_ratio(self.ratio)

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        g = _draw.generator()
        if not _draw.coin(self.p, g):
            return image
        chw = plain(image)
        c, h, w = chw.shape
        if self.value != "random" and len(self.value) not in (1, c):
            raise ValueError(f"RandomErasing has {len(self.value)} values, the image has {c} channels")
        box = _draw.erase_box(c, h, w, self.scale, self._log_ratio, self.value == "random", g)
        if box is None:
            return image
        top, left, bh, bw, values = box
        if not self.inplace:
            check_alloc("RandomErasing's copy", chw.numel() * chw.element_size(), self.max_alloc)
            chw = chw.clone()  # keeps the memory layout
        chw[..., top : top + bh, left : left + bw] = values if values is not None else torch.tensor(self.value)[
            :, None, None]
        return chw.as_subclass(Image)
