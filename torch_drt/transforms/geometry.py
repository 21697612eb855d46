"""Geometry with torchvision's and Pillow's values: crops, padding, flips, rotations and resizing.

These take HWC images of either dtype (the result keeps the input's layout); Resize takes uint8.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from PIL import Image as PILImage

from torch_drt.transforms._image import Image, as_image
from torch_drt.transforms.base import Transform

__all__ = ["CenterCrop", "Crop", "HFlip", "Pad", "PadTo", "Resize", "Rotate90", "VFlip"]


def _out(hwc: torch.Tensor, like: Image) -> Image:
    hwc = hwc.contiguous()
    return Image(hwc, "hwc") if like.layout == "hwc" else Image(hwc.permute(2, 0, 1).contiguous(), "chw")


def _crop(hwc: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    """torchvision ``F.crop``: the part outside the image is zero."""
    h, w, c = hwc.shape
    if top >= 0 and left >= 0 and top + height <= h and left + width <= w:
        return hwc[top : top + height, left : left + width]
    out = torch.zeros((height, width, c), dtype=hwc.dtype)
    y0, x0, y1, x1 = max(top, 0), max(left, 0), min(top + height, h), min(left + width, w)
    if y1 > y0 and x1 > x0:
        out[y0 - top : y1 - top, x0 - left : x1 - left] = hwc[y0:y1, x0:x1]
    return out


class Crop(Transform):
    """``F.crop(top, left, height, width)``; regions outside the image are zero."""

    def __init__(self, top: int, left: int, height: int, width: int) -> None:
        if height < 1 or width < 1:
            raise ValueError(f"{height=} and {width=} must be > 0")
        self.top, self.left, self.height, self.width = top, left, height, width

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        return _out(_crop(image.hwc, self.top, self.left, self.height, self.width), image)


def _pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    if isinstance(size, int):
        pair = (size, size)
    elif len(size) == 1:
        pair = (int(size[0]), int(size[0]))
    elif len(size) == 2:
        pair = (int(size[0]), int(size[1]))
    else:
        raise ValueError(f"{name} must be an int or (height, width), got {size!r}")
    if min(pair) < 1:
        raise ValueError(f"{name}={size!r} must be > 0")
    return pair


class CenterCrop(Transform):
    """torchvision ``CenterCrop(size)``: zero-padded first when the crop is larger than the image."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = _pair(size, "size")

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        hwc = image.hwc
        ch, cw = self.size
        h, w = hwc.shape[:2]
        if ch > h or cw > w:
            pad = (
                (cw - w) // 2 if cw > w else 0,
                (ch - h) // 2 if ch > h else 0,
                (cw - w + 1) // 2 if cw > w else 0,
                (ch - h + 1) // 2 if ch > h else 0,
            )
            hwc = _pad(hwc, pad, 0, "constant")
            h, w = hwc.shape[:2]
            if ch == h and cw == w:
                return _out(hwc, image)
        top, left = round((h - ch) / 2.0), round((w - cw) / 2.0)  # torchvision's rounding (half to even)
        return _out(hwc[top : top + ch, left : left + cw], image)


PadMode = Literal["constant", "edge", "reflect", "symmetric"]


def _pad(hwc: torch.Tensor, ltrb: tuple[int, int, int, int], fill: float, mode: PadMode) -> torch.Tensor:
    left, top, right, bottom = ltrb
    widths = ((top, bottom), (left, right), (0, 0))
    arr = hwc.numpy()
    if mode == "constant":
        out = np.pad(arr, widths, mode="constant", constant_values=np.array(fill).astype(arr.dtype))
    else:
        out = np.pad(arr, widths, mode=mode)
    return torch.from_numpy(out)


class Pad(Transform):
    """torchvision ``Pad``: ``padding`` is one int (all sides), (left/right, top/bottom) or (l, t, r, b)."""

    def __init__(self, padding: int | Sequence[int], fill: float = 0, padding_mode: PadMode = "constant") -> None:
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise ValueError(f"{padding_mode=} must be constant, edge, reflect or symmetric")
        p = [padding] if isinstance(padding, int) else list(padding)
        if len(p) == 1:
            p = p * 4
        elif len(p) == 2:
            p = [p[0], p[1], p[0], p[1]]
        elif len(p) != 4:
            raise ValueError(f"{padding=} must have 1, 2 or 4 values")
        if min(p) < 0:
            raise ValueError(f"{padding=} must be >= 0")
        self.padding, self.fill, self.padding_mode = tuple(p), fill, padding_mode

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        hwc = image.hwc
        if self.padding_mode == "reflect" and max(self.padding) >= min(hwc.shape[:2]):
            raise ValueError(f"reflect padding {self.padding} must be smaller than the image {tuple(hwc.shape[:2])}")
        return _out(_pad(hwc, self.padding, self.fill, self.padding_mode), image)


class PadTo(Transform):
    """Pad with ``fill`` up to ``width`` x ``height``: right and bottom, or evenly with ``anchor="center"``.

    It never crops: a side already at least as large is left as it is.
    """

    def __init__(self, width: int, height: int, fill: float = 0, anchor: Literal["top_left", "center"] = "top_left"):
        if width < 1 or height < 1:
            raise ValueError(f"{width=} and {height=} must be > 0")
        if anchor not in ("top_left", "center"):
            raise ValueError(f"{anchor=} must be 'top_left' or 'center'")
        self.width, self.height, self.fill, self.anchor = width, height, fill, anchor

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        hwc = image.hwc
        h, w = hwc.shape[:2]
        dw, dh = max(0, self.width - w), max(0, self.height - h)
        if not dw and not dh:
            return image
        ltrb = (dw // 2, dh // 2, dw - dw // 2, dh - dh // 2) if self.anchor == "center" else (0, 0, dw, dh)
        if self.fill == 0 and self.anchor == "top_left":  # the common case: zeros, then one copy
            out = torch.zeros((h + dh, w + dw, hwc.shape[2]), dtype=hwc.dtype)
            out[:h, :w] = hwc
            return _out(out, image)
        return _out(_pad(hwc, ltrb, self.fill, "constant"), image)


class HFlip(Transform):
    """``F.hflip``: mirror left-right."""

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        return _out(torch.flip(image.hwc, dims=(1,)), image)


class VFlip(Transform):
    """``F.vflip``: mirror top-bottom."""

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        return _out(torch.flip(image.hwc, dims=(0,)), image)


class Rotate90(Transform):
    """``numpy.rot90(image, k)``: k quarter turns counter-clockwise."""

    def __init__(self, k: int = 1) -> None:
        self.k = int(k)

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        return _out(torch.rot90(image.hwc, self.k, dims=(0, 1)), image)


_FILTERS = {
    "nearest": PILImage.NEAREST,
    "bilinear": PILImage.BILINEAR,
    "bicubic": PILImage.BICUBIC,
    "lanczos3": PILImage.LANCZOS,
}
_PIL_MODE = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


class Resize(Transform):
    """torchvision ``Resize`` on uint8 images: Pillow's values (torch's antialiased kernels for grey and RGB with
    bilinear or bicubic, within 1 and 2 levels of Pillow; Pillow itself otherwise, bit for bit).

    ``size``: an int matches the shorter side (keeping the aspect ratio, as torchvision computes it), a pair is
    (height, width). ``max_size`` caps the longer side of an int ``size``. With ``antialias=False`` the
    bilinear and bicubic kernels are torch's (torchvision's tensor path) instead.
    """

    def __init__(
        self,
        size: int | Sequence[int],
        interpolation: Literal["bilinear", "nearest", "bicubic", "lanczos3"] = "bilinear",
        max_size: int | None = None,
        antialias: bool = True,
    ) -> None:
        if interpolation not in _FILTERS:
            raise ValueError(f"{interpolation=} must be one of {sorted(_FILTERS)}")
        if not isinstance(size, int) and max_size is not None:
            raise ValueError("max_size is only allowed with an int size")
        self.size = size if isinstance(size, int) else _pair(size, "size")
        if isinstance(self.size, int) and self.size < 1:
            raise ValueError(f"{size=} must be > 0")
        self.interpolation, self.max_size, self.antialias = interpolation, max_size, antialias

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) of the result for an input of that size."""
        if not isinstance(self.size, int):
            return self.size
        short, long = (height, width) if height <= width else (width, height)
        new_short, new_long = self.size, int(self.size * long / short)
        if self.max_size is not None:
            if self.max_size <= self.size:
                raise ValueError(f"max_size={self.max_size} must be larger than size={self.size}")
            if new_long > self.max_size:
                new_short, new_long = int(self.max_size * new_short / new_long), self.max_size
        return (new_short, new_long) if height <= width else (new_long, new_short)

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        if image.dtype != torch.uint8:
            raise ValueError(f"Resize takes uint8 images, got {image.dtype}: resize before ToFloat")
        hwc = image.hwc
        h, w, c = hwc.shape
        oh, ow = self.output_size(h, w)
        if (oh, ow) == (h, w):
            return image
        if not self.antialias and self.interpolation in ("bilinear", "bicubic"):
            x = hwc.permute(2, 0, 1).unsqueeze(0).float()
            y = torch.nn.functional.interpolate(
                x, size=(oh, ow), mode=self.interpolation, align_corners=False, antialias=False
            )
            out = y.squeeze(0).permute(1, 2, 0).round_().clamp_(0, 255).to(torch.uint8)
            return _out(out, image)
        if c in (1, 3) and self.interpolation in ("bilinear", "bicubic"):
            # torch's antialiased uint8 kernels (channels-last, without the GIL): within 1 level of Pillow for
            # bilinear and 2 for bicubic. Images with alpha go to Pillow, which resamples them premultiplied.
            x = hwc.permute(2, 0, 1).unsqueeze(0)
            y = torch.nn.functional.interpolate(
                x, size=(oh, ow), mode=self.interpolation, antialias=True, align_corners=False
            )
            return _out(y[0].permute(1, 2, 0), image)
        arr = hwc.numpy()
        pil = PILImage.fromarray(arr[:, :, 0] if c == 1 else np.ascontiguousarray(arr), _PIL_MODE[c])
        out = np.array(pil.resize((ow, oh), _FILTERS[self.interpolation]))
        return _out(torch.from_numpy(out[:, :, None] if out.ndim == 2 else out), image)
