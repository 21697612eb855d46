"""Geometry with torchvision's values: crops, padding, flips and rotations, on images of either dtype.

Each result keeps the input's memory layout. Each transform checks the bytes it would allocate against its
``max_alloc`` before allocating.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch

from torch_drt.transforms._hwc import PadMode, check_pad_mode, crop_hwc, nbytes, out_like, pad_hwc, pair, parse_padding
from torch_drt.transforms._image import MAX_ALLOC, Image, as_image, check_alloc, check_max_alloc
from torch_drt.transforms.base import Transform


class Crop(Transform):
    """``F.crop(top, left, height, width)``; regions outside the image are zero."""

    def __init__(self, top: int, left: int, height: int, width: int, max_alloc: int = MAX_ALLOC) -> None:
        if height < 1 or width < 1:
            raise ValueError(f"{height=} and {width=} must be > 0")
        self.top, self.left, self.height, self.width = top, left, height, width
        self.max_alloc = check_max_alloc(max_alloc)

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        hwc = image.hwc
        check_alloc(f"a crop of {self.width}x{self.height}", nbytes(self.height, self.width, hwc), self.max_alloc)
        return out_like(crop_hwc(hwc, self.top, self.left, self.height, self.width, self.max_alloc), image)


class CenterCrop(Transform):
    """torchvision ``CenterCrop(size)``: zero-padded first when the crop is larger than the image."""

    def __init__(self, size: int | Sequence[int], max_alloc: int = MAX_ALLOC) -> None:
        self.size = pair(size, "size")
        self.max_alloc = check_max_alloc(max_alloc)

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        hwc = image.hwc
        ch, cw = self.size
        h, w = hwc.shape[:2]
        check_alloc(f"a center crop of {cw}x{ch}", nbytes(ch, cw, hwc), self.max_alloc)
        if ch > h or cw > w:
            pad = (
                (cw - w) // 2 if cw > w else 0,
                (ch - h) // 2 if ch > h else 0,
                (cw - w + 1) // 2 if cw > w else 0,
                (ch - h + 1) // 2 if ch > h else 0,
            )
            hwc = pad_hwc(hwc, pad, 0, "constant", self.max_alloc)
            h, w = hwc.shape[:2]
            if ch == h and cw == w:
                return out_like(hwc, image)
        top, left = round((h - ch) / 2.0), round((w - cw) / 2.0)  # torchvision's rounding (half to even)
        return out_like(hwc[top : top + ch, left : left + cw], image)


class Pad(Transform):
    """torchvision ``Pad``: ``padding`` is one int (all sides), (left/right, top/bottom) or (l, t, r, b)."""

    def __init__(
        self,
        padding: int | Sequence[int],
        fill: float = 0,
        padding_mode: PadMode = "constant",
        max_alloc: int = MAX_ALLOC,
    ) -> None:
        check_pad_mode(padding_mode)
        self.padding, self.fill, self.padding_mode = parse_padding(padding), fill, padding_mode
        self.max_alloc = check_max_alloc(max_alloc)

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        return out_like(pad_hwc(image.hwc, self.padding, self.fill, self.padding_mode, self.max_alloc), image)


class PadTo(Transform):
    """Pad with ``fill`` up to ``width`` x ``height``: right and bottom, or evenly with ``anchor="center"``.

    It never crops: a side already at least as large is left as it is.
    """

    def __init__(
        self,
        width: int,
        height: int,
        fill: float = 0,
        anchor: Literal["top_left", "center"] = "top_left",
        max_alloc: int = MAX_ALLOC,
    ) -> None:
        if width < 1 or height < 1:
            raise ValueError(f"{width=} and {height=} must be > 0")
        if anchor not in ("top_left", "center"):
            raise ValueError(f"{anchor=} must be 'top_left' or 'center'")
        self.width, self.height, self.fill, self.anchor = width, height, fill, anchor
        self.max_alloc = check_max_alloc(max_alloc)

    def padding(self, height: int, width: int) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) for an image of that size."""
        dw, dh = max(0, self.width - width), max(0, self.height - height)
        return (dw // 2, dh // 2, dw - dw // 2, dh - dh // 2) if self.anchor == "center" else (0, 0, dw, dh)

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        hwc = image.hwc
        h, w, c = hwc.shape
        ltrb = self.padding(h, w)
        if not any(ltrb):
            return image
        if self.fill == 0 and self.anchor == "top_left":  # the common case: zeros, then one copy
            check_alloc(f"padding {w}x{h} to {self.width}x{self.height}", nbytes(h + ltrb[3], w + ltrb[2], hwc),
                        self.max_alloc)
            out = torch.zeros((h + ltrb[3], w + ltrb[2], c), dtype=hwc.dtype)
            out[:h, :w] = hwc
            return out_like(out, image)
        return out_like(pad_hwc(hwc, ltrb, self.fill, "constant", self.max_alloc), image)


class _Copying(Transform):
    """A transform whose result has the input's size (one new tensor), checked against ``max_alloc``."""

    def __init__(self, max_alloc: int = MAX_ALLOC) -> None:
        self.max_alloc = check_max_alloc(max_alloc)

    def _checked(self, image: Any) -> Image:
        image = as_image(image)
        check_alloc(type(self).__name__, image.numel() * image.element_size(), self.max_alloc)
        return image


class HFlip(_Copying):
    """``F.hflip``: mirror left-right."""

    def apply(self, image: Any) -> Image:
        image = self._checked(image)
        return out_like(torch.flip(image.hwc, dims=(1,)), image)


class VFlip(_Copying):
    """``F.vflip``: mirror top-bottom."""

    def apply(self, image: Any) -> Image:
        image = self._checked(image)
        return out_like(torch.flip(image.hwc, dims=(0,)), image)


class Rotate90(_Copying):
    """``numpy.rot90(image, k)`` on (H, W): k quarter turns counter-clockwise."""

    def __init__(self, k: int = 1, max_alloc: int = MAX_ALLOC) -> None:
        super().__init__(max_alloc)
        self.k = int(k)

    def apply(self, image: Any) -> Image:
        image = self._checked(image)
        return out_like(torch.rot90(image.hwc, self.k, dims=(0, 1)), image)
