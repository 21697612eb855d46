"""Resize with torchvision's output size and Pillow's values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from PIL import Image as PILImage

from torch_drt.transforms._hwc import pair
from torch_drt.transforms._image import MAX_ALLOC, Image, as_image, check_alloc, check_max_alloc, plain, to_uint8
from torch_drt.transforms.base import Transform

Interpolation = Literal["bilinear", "nearest", "bicubic", "lanczos3"]
_FILTERS = {  # Pillow's enum: the module's same-valued constants are not declared to type checkers
    "nearest": PILImage.Resampling.NEAREST,
    "bilinear": PILImage.Resampling.BILINEAR,
    "bicubic": PILImage.Resampling.BICUBIC,
    "lanczos3": PILImage.Resampling.LANCZOS,
}
INTERPOLATIONS = tuple(_FILTERS)
_PIL_MODE = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
# the antialiased kernels ``interpolate(..., antialias=True, align_corners=False)`` calls for a 4-D input with a size
_AA_KERNELS = {
    mode: getattr(torch._C._nn, f"_upsample_{mode}2d_aa", None) for mode in ("bilinear", "bicubic")
}


def check_interpolation(interpolation: str) -> str:
    if interpolation not in _FILTERS:
        raise ValueError(f"{interpolation=} must be one of {sorted(_FILTERS)}")
    return interpolation


def _peak(h: int, w: int, c: int, oh: int, ow: int, torch_kernel: bool, antialias: bool) -> int:
    """Bytes a resize of (h, w, c) to (oh, ow) allocates at its peak, intermediates included."""
    if torch_kernel and antialias:  # a channels-last input copy, the separable pass between the two, the output
        return c * (h * w + max(h * ow, oh * w) + oh * ow)
    if torch_kernel:  # float32 input and output, then the uint8 result
        return c * (4 * h * w + 5 * oh * ow)
    per_pixel = 1 if c == 1 else 4  # Pillow's image, its separable pass, its result, then the array twice
    return per_pixel * (h * w + max(h * ow, oh * w) + oh * ow) + 2 * c * oh * ow


def resize_chw(
    chw: torch.Tensor, oh: int, ow: int, interpolation: str, antialias: bool, max_alloc: int
) -> torch.Tensor:
    """Resize a plain uint8 (C, H, W) tensor (any memory layout) to (oh, ow) with Resize's values, checking its
    peak memory first. The result's memory layout is the one torchvision's resize gives for the torch kernels
    (contiguous), HWC for Pillow's."""
    c, h, w = chw.shape
    torch_kernel = interpolation in ("bilinear", "bicubic") and (c in (1, 3) or not antialias)
    check_alloc(f"resizing {w}x{h}x{c} to {ow}x{oh}", _peak(h, w, c, oh, ow, torch_kernel, antialias), max_alloc)
    if torch_kernel and not antialias:
        x = chw.unsqueeze(0).float()
        y = torch.nn.functional.interpolate(x, size=(oh, ow), mode=interpolation, align_corners=False, antialias=False)
        return to_uint8(y[0].round_().clamp_(0, 255))
    if torch_kernel:
        # torch's antialiased uint8 kernels (without the GIL), called as torchvision calls them: torchvision's tensor
        # values, within 1 level of Pillow for bilinear and 2 for bicubic. Images with alpha go to Pillow, which
        # resamples them premultiplied.
        x = chw.reshape(-1, c, h, w)
        kernel = _AA_KERNELS.get(interpolation)
        if kernel is not None:  # what interpolate calls, without its Python checks (~12 us, with the GIL)
            return kernel(x, (oh, ow), False, None).reshape(c, oh, ow)
        y = torch.nn.functional.interpolate(x, size=(oh, ow), mode=interpolation, antialias=True, align_corners=False)
        return y.reshape(c, oh, ow)
    arr = np.ascontiguousarray(chw.permute(1, 2, 0).numpy())
    pil = PILImage.fromarray(arr[:, :, 0] if c == 1 else arr, _PIL_MODE[c])
    out = torch.from_numpy(np.array(pil.resize((ow, oh), _FILTERS[interpolation])))
    return out.unsqueeze(0) if out.dim() == 2 else out.permute(2, 0, 1)


class Resize(Transform):
    """torchvision ``Resize`` on uint8 images: Pillow's values (torch's antialiased kernels for grey and RGB with
    bilinear or bicubic, within 1 and 2 levels of Pillow; Pillow itself otherwise, bit for bit).

    ``size``: an int matches the shorter side (keeping the aspect ratio, as torchvision computes it), a pair is
    (height, width). ``max_size`` caps the longer side of an int ``size``. With ``antialias=False`` the
    bilinear and bicubic kernels are torch's (torchvision's tensor path) instead. ``max_alloc`` bounds the bytes
    one resize allocates, intermediates included (a 1 x 16384 image resized to 224 would need gigabytes). The
    result is in CHW memory (as torchvision's resize gives it) from torch's kernels, HWC memory from Pillow.
    """

    def __init__(
        self,
        size: int | Sequence[int],
        interpolation: Interpolation = "bilinear",
        max_size: int | None = None,
        antialias: bool = True,
        max_alloc: int = MAX_ALLOC,
    ) -> None:
        self.interpolation = check_interpolation(interpolation)
        if not isinstance(size, int) and max_size is not None:
            raise ValueError("max_size is only allowed with an int size")
        self.size = size if isinstance(size, int) else pair(size, "size")
        if isinstance(self.size, int) and self.size < 1:
            raise ValueError(f"{size=} must be > 0")
        if max_size is not None and isinstance(self.size, int) and max_size <= self.size:
            raise ValueError(f"{max_size=} must be larger than {size=}")
        self.max_size, self.antialias = max_size, antialias
        self.max_alloc = check_max_alloc(max_alloc)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) of the result for an input of that size."""
        if not isinstance(self.size, int):
            return self.size
        short, long = (height, width) if height <= width else (width, height)
        new_short, new_long = self.size, int(self.size * long / short)
        if self.max_size is not None and new_long > self.max_size:
            new_short, new_long = int(self.max_size * new_short / new_long), self.max_size
        return (new_short, new_long) if height <= width else (new_long, new_short)

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        if image.dtype != torch.uint8:
            raise ValueError(f"Resize takes uint8 images, got {image.dtype}: resize before ToFloat")
        chw = plain(image)
        oh, ow = self.output_size(*chw.shape[1:])
        if (oh, ow) == tuple(chw.shape[1:]):
            return image
        return resize_chw(chw, oh, ow, self.interpolation, self.antialias, self.max_alloc).as_subclass(Image)
