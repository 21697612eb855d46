"""Geometry with torchvision's values: crops, padding, flips and rotations, on images of either dtype.

Each result keeps the input's memory layout. Each transform checks the bytes it would allocate against its
``max_alloc`` before allocating.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from torch_drt.transforms._image import MAX_ALLOC, Image, as_image, check_alloc, check_max_alloc
from torch_drt.transforms.base import Transform

__all__ = ["CenterCrop", "Crop", "HFlip", "Pad", "PadTo", "Rotate90", "VFlip", "crop_hwc", "pad_hwc", "pair"]

PadMode = Literal["constant", "edge", "reflect", "symmetric"]


def out_like(hwc: torch.Tensor, like: Image) -> Image:
    """An Image of the plain (H, W, C) tensor ``hwc`` in the memory layout of ``like`` (one copy at most)."""
    if like.memory_layout == "hwc":
        return hwc.contiguous().permute(2, 0, 1).as_subclass(Image)
    return hwc.permute(2, 0, 1).contiguous().as_subclass(Image)


def _nbytes(height: int, width: int, like: torch.Tensor) -> int:
    return height * width * like.shape[2] * like.element_size()


def crop_hwc(hwc: torch.Tensor, top: int, left: int, height: int, width: int, max_alloc: int) -> torch.Tensor:
    """torchvision ``F.crop`` on a plain HWC tensor: the part outside the image is zero. A view when inside."""
    h, w, c = hwc.shape
    if top >= 0 and left >= 0 and top + height <= h and left + width <= w:
        return hwc[top : top + height, left : left + width]
    check_alloc(f"a crop of {width}x{height}", _nbytes(height, width, hwc), max_alloc)
    out = torch.zeros((height, width, c), dtype=hwc.dtype)
    y0, x0, y1, x1 = max(top, 0), max(left, 0), min(top + height, h), min(left + width, w)
    if y1 > y0 and x1 > x0:
        out[y0 - top : y1 - top, x0 - left : x1 - left] = hwc[y0:y1, x0:x1]
    return out


def pad_hwc(
    hwc: torch.Tensor, ltrb: tuple[int, int, int, int], fill: float, mode: PadMode, max_alloc: int
) -> torch.Tensor:
    """torchvision ``F.pad`` on a plain HWC tensor, padding (left, top, right, bottom)."""
    left, top, right, bottom = ltrb
    h, w = hwc.shape[:2]
    check_alloc(f"padding {w}x{h} by {ltrb}", _nbytes(h + top + bottom, w + left + right, hwc), max_alloc)
    if mode == "reflect" and max(ltrb) >= min(h, w):
        raise ValueError(f"reflect padding {ltrb} must be smaller than the image {(h, w)}")
    arr = hwc.numpy()
    widths = ((top, bottom), (left, right), (0, 0))
    if mode == "constant":
        out = np.pad(arr, widths, mode="constant", constant_values=np.array(fill).astype(arr.dtype))
    else:
        out = np.pad(arr, widths, mode=mode)
    return torch.from_numpy(out)


def parse_padding(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """torchvision's padding argument as (left, top, right, bottom)."""
    p = [padding] if isinstance(padding, int) else [int(x) for x in padding]
    if len(p) == 1:
        p = p * 4
    elif len(p) == 2:
        p = [p[0], p[1], p[0], p[1]]
    elif len(p) != 4:
        raise ValueError(f"{padding=} must have 1, 2 or 4 values")
    if min(p) < 0:
        raise ValueError(f"{padding=} must be >= 0")
    return p[0], p[1], p[2], p[3]


def check_pad_mode(padding_mode: str) -> None:
    if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
        raise ValueError(f"{padding_mode=} must be constant, edge, reflect or symmetric")


def pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    """An int or a one- or two-item sequence as (height, width) > 0."""
    if isinstance(size, int):
        out = (size, size)
    elif len(size) == 1:
        out = (int(size[0]), int(size[0]))
    elif len(size) == 2:
        out = (int(size[0]), int(size[1]))
    else:
        raise ValueError(f"{name} must be an int or (height, width), got {size!r}")
    if min(out) < 1:
        raise ValueError(f"{name}={size!r} must be > 0")
    return out


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
        check_alloc(f"a crop of {self.width}x{self.height}", _nbytes(self.height, self.width, hwc), self.max_alloc)
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
        check_alloc(f"a center crop of {cw}x{ch}", _nbytes(ch, cw, hwc), self.max_alloc)
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
            check_alloc(f"padding {w}x{h} to {self.width}x{self.height}", _nbytes(h + ltrb[3], w + ltrb[2], hwc),
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
