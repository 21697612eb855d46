"""Element type and layout: ToFloat and Normalize with ToTensor's and Normalize's values; ToChw, ToHwc."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
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

    def __init__(self, to_float: ToFloat, normalize: Normalize, pad_to: Any = None) -> None:
        self.to_float, self.normalize, self.pad_to = to_float, normalize, pad_to

    def _values(self, x: torch.Tensor) -> torch.Tensor:
        """ToFloat then Normalize, in place, on a float32 CHW tensor (the same element operations)."""
        if self.to_float.scale:
            x.div_(255)
        return x.sub_(self.normalize._mean.view(-1, 1, 1)).div_(self.normalize._std.view(-1, 1, 1))

    def __call__(self, image: Any) -> Image:
        image = as_image(image)
        if image.dtype != torch.uint8:
            raise ValueError(f"ToFloat takes uint8 images, got {image.dtype}")
        hwc = image.hwc
        h, w, c = hwc.shape
        if c != len(self.normalize.mean):
            raise ValueError(f"Normalize has {len(self.normalize.mean)} channel values, the image has {c} channels")
        pad = self.pad_to
        if pad is None or (pad.width <= w and pad.height <= h):
            out = torch.empty((c, h, w), dtype=torch.float32)
            out.copy_(hwc.permute(2, 0, 1))
            return Image(self._values(out), "chw")
        # PadTo as well: the padding's value is computed once per channel with the same operations as a padded
        # pixel, and only the image's own pixels are converted.
        dw, dh = max(0, pad.width - w), max(0, pad.height - h)
        left, top = (dw // 2, dh // 2) if pad.anchor == "center" else (0, 0)
        fill = self._values(torch.full((c, 1, 1), float(np.uint8(pad.fill)), dtype=torch.float32))
        out = fill.expand(c, h + dh, w + dw).contiguous()
        region = out[:, top : top + h, left : left + w]
        region.copy_(hwc.permute(2, 0, 1))
        self._values(region)
        return Image(out, "chw")
