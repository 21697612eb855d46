"""RandomResizedCrop and RandomCrop with torchvision v2's parameters and values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torch_drt.transforms import _draw
from torch_drt.transforms._hwc import PadMode, check_pad_mode, crop_hwc, out_like, pad_hwc, pair, parse_padding
from torch_drt.transforms._image import MAX_ALLOC, Image, as_image, check_alloc, check_max_alloc, plain
from torch_drt.transforms.base import Transform
from torch_drt.transforms.resize import Interpolation, check_interpolation, resize_chw


class RandomResizedCrop(Transform):
    """torchvision v2 ``RandomResizedCrop``: a crop of random area (``scale`` of the image's) and aspect ratio
    (log-uniform in ``ratio``), drawn like torchvision from the item's generator, resized to ``size`` with
    ``Resize``'s values (torchvision's tensor values for grey and RGB with bilinear or bicubic; Pillow's, as
    torchvision gives for PIL images, otherwise). uint8 images.

    Args:
        size: (height, width) of the result, or one int for a square.
        scale: bounds of the crop's area, as fractions of the image's.
        ratio: bounds of the crop's aspect ratio (width / height).
        interpolation: ``"bilinear"``, ``"nearest"``, ``"bicubic"`` or ``"lanczos3"``.
        antialias: as for ``Resize``.
        max_alloc: the most bytes one image's resize may allocate.
    """

    def __init__(
        self,
        size: int | Sequence[int],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
        interpolation: Interpolation = "bilinear",
        antialias: bool = True,
        max_alloc: int = MAX_ALLOC,
    ) -> None:
        self.size = pair(size, "size")
        if len(scale) != 2 or len(ratio) != 2:
            raise ValueError(f"{scale=} and {ratio=} must be (min, max) pairs")
        if scale[0] > scale[1] or ratio[0] > ratio[1] or scale[0] < 0 or ratio[0] <= 0:
            raise ValueError(f"{scale=} and {ratio=} must be increasing, scale >= 0 and ratio > 0")
        self.scale, self.ratio = (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1]))
        self.interpolation = check_interpolation(interpolation)
        self.antialias = antialias
        self.max_alloc = check_max_alloc(max_alloc)
        self._log_ratio = _draw.log_ratio(self.ratio)

    def draw(self, height: int, width: int, g: torch.Generator) -> tuple[int, int, int, int]:
        """(top, left, height, width) of the crop for an image of that size, as torchvision draws it."""
        return _draw.resized_crop_box(height, width, self.scale, self.ratio, self._log_ratio, g)

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        chw = plain(image)
        if chw.dtype != torch.uint8:
            raise ValueError(f"RandomResizedCrop takes uint8 images, got {chw.dtype}: crop before ToFloat")
        top, left, h, w = self.draw(chw.shape[1], chw.shape[2], _draw.generator())
        crop = chw.narrow(1, top, h).narrow(2, left, w)  # the view torch's indexing gives, at a fraction of its cost
        oh, ow = self.size
        if (oh, ow) == (h, w):
            return out_like(crop.permute(1, 2, 0), image)
        return resize_chw(crop, oh, ow, self.interpolation, self.antialias, self.max_alloc).as_subclass(Image)


class RandomCrop(Transform):
    """torchvision v2 ``RandomCrop``: optional padding (``padding``, and ``pad_if_needed`` to reach ``size``),
    then a crop at a random place drawn like torchvision from the item's generator. Images of either dtype.

    Args:
        size: (height, width) of the crop, or one int for a square.
        padding: one int (all sides), (left/right, top/bottom) or (left, top, right, bottom), or None.
        pad_if_needed: pad sides shorter than ``size`` (on both sides, by the difference, as torchvision does).
        fill: the constant padding's value.
        padding_mode: ``"constant"``, ``"edge"``, ``"reflect"`` or ``"symmetric"``.
        max_alloc: the most bytes one image's padding and crop may allocate.

    Raises:
        ValueError: for a crop larger than the (padded) image.
    """

    def __init__(
        self,
        size: int | Sequence[int],
        padding: int | Sequence[int] | None = None,
        pad_if_needed: bool = False,
        fill: float = 0,
        padding_mode: PadMode = "constant",
        max_alloc: int = MAX_ALLOC,
    ) -> None:
        self.size = pair(size, "size")
        check_pad_mode(padding_mode)
        self.padding = parse_padding(padding) if padding else None
        self.pad_if_needed, self.fill, self.padding_mode = pad_if_needed, fill, padding_mode
        self.max_alloc = check_max_alloc(max_alloc)

    def draw(self, height: int, width: int, g: torch.Generator) -> tuple[tuple[int, int, int, int], int, int]:
        """((left, top, right, bottom) padding, top, left) for an image of that size, as torchvision draws them."""
        left, top, right, bottom = self.padding or (0, 0, 0, 0)
        padded_h, padded_w = height + top + bottom, width + left + right
        crop_h, crop_w = self.size
        if self.pad_if_needed and padded_h < crop_h:
            diff = crop_h - padded_h
            top, bottom, padded_h = top + diff, bottom + diff, padded_h + 2 * diff
        if self.pad_if_needed and padded_w < crop_w:
            diff = crop_w - padded_w
            left, right, padded_w = left + diff, right + diff, padded_w + 2 * diff
        if padded_h < crop_h or padded_w < crop_w:
            raise ValueError(f"crop size {(crop_h, crop_w)} is larger than the (padded) image {(padded_h, padded_w)}")
        y = _draw.randint(padded_h - crop_h + 1, g, size=()) if padded_h > crop_h else 0
        x = _draw.randint(padded_w - crop_w + 1, g, size=()) if padded_w > crop_w else 0
        return (left, top, right, bottom), y, x

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        hwc = image.hwc
        ltrb, y, x = self.draw(hwc.shape[0], hwc.shape[1], _draw.generator())
        crop_h, crop_w = self.size
        if self.padding_mode == "constant" and self.fill == 0:
            # the crop of the zero-padded image, without making the padded image: the same values
            return out_like(crop_hwc(hwc, y - ltrb[1], x - ltrb[0], crop_h, crop_w, self.max_alloc), image)
        if any(ltrb):
            hwc = pad_hwc(hwc, ltrb, self.fill, self.padding_mode, self.max_alloc)
        check_alloc(f"a crop of {crop_w}x{crop_h}", crop_h * crop_w * hwc.shape[2] * hwc.element_size(), self.max_alloc)
        return out_like(hwc[y : y + crop_h, x : x + crop_w], image)
