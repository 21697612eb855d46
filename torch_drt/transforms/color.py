"""Colour conversions with Pillow's values: ToRgb, ToRgba, ToGray (``Image.convert``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image as PILImage

from torch_drt.transforms._image import MAX_ALLOC, Image, as_image, check_alloc, check_max_alloc, from_hwc, plain
from torch_drt.transforms.base import Transform

_MODE_OF = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


class _Convert(Transform):
    """``Image.convert(target)`` on uint8 images; an image already in ``target`` is returned as it is."""

    target = "RGB"

    def __init__(self, max_alloc: int = MAX_ALLOC) -> None:
        self.max_alloc = check_max_alloc(max_alloc)

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        chw = plain(image)  # the checks on the plain tensor: a tv_tensor's dtype is a Python property
        if chw.dtype != torch.uint8:
            raise ValueError(f"{type(self).__name__} takes uint8 images, got {chw.dtype}: convert before ToFloat")
        channels, h, w = chw.shape
        if _MODE_OF[channels] == self.target:
            return image
        hwc = chw.permute(1, 2, 0)
        # Pillow's image and its conversion (1 or 4 bytes a pixel each), then the result twice (bytes and array)
        per_pixel = (1 if channels == 1 else 4) + (1 if self.target == "L" else 4) + 2 * _CHANNELS[self.target]
        check_alloc(f"{type(self).__name__} of {w}x{h}", h * w * per_pixel, self.max_alloc)
        arr = np.ascontiguousarray(hwc.numpy())
        pil = PILImage.fromarray(arr[:, :, 0] if channels == 1 else arr, _MODE_OF[channels])
        out = np.array(pil.convert(self.target))
        return from_hwc(torch.from_numpy(out[:, :, None] if out.ndim == 2 else out))


class ToRgb(_Convert):
    """``Image.convert("RGB")``: grey is replicated, alpha is dropped."""

    target = "RGB"


class ToRgba(_Convert):
    """``Image.convert("RGBA")``: alpha 255 where the image has none."""

    target = "RGBA"


class ToGray(_Convert):
    """``Image.convert("L")``: ITU-R 601-2 luma with Pillow's rounding; one channel."""

    target = "L"
