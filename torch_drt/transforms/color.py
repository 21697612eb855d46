"""Colour conversions with Pillow's values: ToRgb, ToRgba, ToGray (``Image.convert``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image as PILImage

from torch_drt.transforms._image import Image, as_image
from torch_drt.transforms.base import Transform

__all__ = ["ToGray", "ToRgb", "ToRgba"]

_MODE_OF = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


def _convert(obj: Any, target: str, name: str) -> Image:
    image = as_image(obj)
    if image.dtype != torch.uint8:
        raise ValueError(f"{name} takes uint8 images, got {image.dtype}: convert before ToFloat")
    hwc = image.hwc
    channels = hwc.shape[2]
    if _MODE_OF[channels] == target:
        return image if image.layout == "hwc" else Image(hwc.contiguous(), "hwc")
    arr = hwc.numpy()
    pil = PILImage.fromarray(arr[:, :, 0] if channels == 1 else np.ascontiguousarray(arr), _MODE_OF[channels])
    out = np.array(pil.convert(target))
    return Image(torch.from_numpy(out[:, :, None] if out.ndim == 2 else out), "hwc")


class ToRgb(Transform):
    """``Image.convert("RGB")``: grey is replicated, alpha is dropped."""

    def __call__(self, image: Any) -> Image:
        return _convert(image, "RGB", "ToRgb")


class ToRgba(Transform):
    """``Image.convert("RGBA")``: alpha 255 where the image has none."""

    def __call__(self, image: Any) -> Image:
        return _convert(image, "RGBA", "ToRgba")


class ToGray(Transform):
    """``Image.convert("L")``: ITU-R 601-2 luma with Pillow's rounding; one channel."""

    def __call__(self, image: Any) -> Image:
        return _convert(image, "L", "ToGray")
