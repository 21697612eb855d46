"""Operations on plain (H, W, C) tensors shared by the geometry transforms: crops, padding, argument parsing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from torch_drt.transforms._image import Image, check_alloc

PadMode = Literal["constant", "edge", "reflect", "symmetric"]


def out_like(hwc: torch.Tensor, like: Image) -> Image:
    """An Image of the plain (H, W, C) tensor ``hwc`` in the memory layout of ``like`` (one copy at most)."""
    if like.memory_layout == "hwc":
        return hwc.contiguous().permute(2, 0, 1).as_subclass(Image)
    return hwc.permute(2, 0, 1).contiguous().as_subclass(Image)


def nbytes(height: int, width: int, like: torch.Tensor) -> int:
    """Bytes of a (height, width) image with the channels and element type of the HWC tensor ``like``."""
    return height * width * like.shape[2] * like.element_size()


def crop_hwc(hwc: torch.Tensor, top: int, left: int, height: int, width: int, max_alloc: int) -> torch.Tensor:
    """torchvision ``F.crop`` on a plain HWC tensor: the part outside the image is zero. A view when inside."""
    h, w, c = hwc.shape
    if top >= 0 and left >= 0 and top + height <= h and left + width <= w:
        return hwc[top : top + height, left : left + width]
    check_alloc(f"a crop of {width}x{height}", nbytes(height, width, hwc), max_alloc)
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
    check_alloc(f"padding {w}x{h} by {ltrb}", nbytes(h + top + bottom, w + left + right, hwc), max_alloc)
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
    """Refuse a padding mode torchvision does not have."""
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
