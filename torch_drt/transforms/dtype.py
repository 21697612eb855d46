"""Element type and layout: ToFloat and Normalize with ToTensor's and Normalize's values; ToChw, ToHwc."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torch_drt.transforms._image import Image, as_image
from torch_drt.transforms.base import Transform

__all__ = ["FloatNormalizeChw", "Normalize", "ToChw", "ToFloat", "ToHwc"]


class ToFloat(Transform):
    """uint8 to float32: ``x / 255`` with ``scale`` (the values of ``ToTensor``), else the same numbers."""

    def __init__(self, scale: bool = True) -> None:
        self.scale = scale

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        if image.dtype != torch.uint8:
            raise ValueError(f"ToFloat takes uint8 images, got {image.dtype}")
        out = image.tensor.float()
        return Image(out.div_(255) if self.scale else out, image.layout)


class Normalize(Transform):
    """torchvision ``Normalize``: ``(x - mean[c]) / std[c]`` per channel, in float32, HWC or CHW."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        if len(mean) != len(std) or not mean:
            raise ValueError(f"mean {list(mean)} and std {list(std)} must have the same, non-zero length")
        if any(s == 0 for s in std):
            raise ValueError(f"std {list(std)} must not contain 0")
        self.mean, self.std = [float(m) for m in mean], [float(s) for s in std]
        self._mean = torch.tensor(self.mean, dtype=torch.float32)
        self._std = torch.tensor(self.std, dtype=torch.float32)

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        if image.dtype != torch.float32:
            raise ValueError(f"Normalize takes float32 images, got {image.dtype}: apply ToFloat first")
        channels = image.shape[2] if image.layout == "hwc" else image.shape[0]
        if channels != len(self.mean):
            raise ValueError(f"Normalize has {len(self.mean)} channel values, the image has {channels} channels")
        shape = (1, 1, -1) if image.layout == "hwc" else (-1, 1, 1)
        out = image.tensor.sub(self._mean.view(shape)).div_(self._std.view(shape))
        return Image(out, image.layout)


class ToChw(Transform):
    """To (channels, height, width): the layout of ``ToTensor``."""

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        return image if image.layout == "chw" else Image(image.tensor.permute(2, 0, 1).contiguous(), "chw")


class ToHwc(Transform):
    """To (height, width, channels)."""

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        return image if image.layout == "hwc" else Image(image.tensor.permute(1, 2, 0).contiguous(), "hwc")


class FloatNormalizeChw(Transform):
    """ToFloat, Normalize and ToChw in one step (``Compose`` uses it for that sequence).

    The values are the same, element for element: the uint8 HWC data is converted and transposed in one pass
    into a fresh CHW float32 tensor, then divided by 255 and normalised in place, plane by plane (a per-channel
    broadcast over contiguous planes, much faster than over an innermost axis of 3).
    """

    def __init__(self, to_float: ToFloat, normalize: Normalize) -> None:
        self.to_float, self.normalize = to_float, normalize

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        if image.dtype != torch.uint8:
            raise ValueError(f"ToFloat takes uint8 images, got {image.dtype}")
        hwc = image.hwc
        if hwc.shape[2] != len(self.normalize.mean):
            raise ValueError(
                f"Normalize has {len(self.normalize.mean)} channel values, the image has {hwc.shape[2]} channels"
            )
        out = torch.empty((hwc.shape[2], hwc.shape[0], hwc.shape[1]), dtype=torch.float32)
        out.copy_(hwc.permute(2, 0, 1))
        if self.to_float.scale:
            out.div_(255)
        return Image(out.sub_(self.normalize._mean.view(-1, 1, 1)).div_(self.normalize._std.view(-1, 1, 1)), "chw")
