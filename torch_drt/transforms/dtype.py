"""Element type and memory layout: ToFloat and Normalize with ToTensor's and Normalize's values; ToChw, ToHwc."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torch_drt.transforms._image import MAX_ALLOC, Image, as_image, check_alloc, check_max_alloc, plain
from torch_drt.transforms._recycle import RecyclingPool
from torch_drt.transforms.base import Transform

_255 = np.float32(255)


def _float_bytes(image: Image, what: str, max_alloc: int) -> None:
    check_alloc(f"{what} of {tuple(image.shape)}", image.numel() * 4, max_alloc)


class ToFloat(Transform):
    """uint8 to float32: ``x / 255`` with ``scale`` (the values of ``ToTensor``), else the same numbers."""

    def __init__(self, scale: bool = True, max_alloc: int = MAX_ALLOC) -> None:
        self.scale = scale
        self.max_alloc = check_max_alloc(max_alloc)

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        if image.dtype != torch.uint8:
            raise ValueError(f"ToFloat takes uint8 images, got {image.dtype}")
        _float_bytes(image, "ToFloat", self.max_alloc)
        out = plain(image).float()  # keeps the memory layout
        return (out.div_(255) if self.scale else out).as_subclass(Image)


class Normalize(Transform):
    """torchvision ``Normalize``: ``(x - mean[c]) / std[c]`` per channel, on float32 images."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], max_alloc: int = MAX_ALLOC) -> None:
        if len(mean) != len(std) or not mean:
            raise ValueError(f"mean {list(mean)} and std {list(std)} must have the same, non-zero length")
        if any(s == 0 for s in std):
            raise ValueError(f"std {list(std)} must not contain 0")
        self.mean, self.std = [float(m) for m in mean], [float(s) for s in std]
        self.max_alloc = check_max_alloc(max_alloc)
        self._mean = torch.tensor(self.mean, dtype=torch.float32).view(-1, 1, 1)
        self._std = torch.tensor(self.std, dtype=torch.float32).view(-1, 1, 1)
        self._mean_np, self._std_np = self._mean.numpy(), self._std.numpy()

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        if image.dtype != torch.float32:
            raise ValueError(f"Normalize takes float32 images, got {image.dtype}: apply ToFloat first")
        if image.shape[0] != len(self.mean):
            raise ValueError(f"Normalize has {len(self.mean)} channel values, the image has {image.shape[0]} channels")
        _float_bytes(image, "Normalize", self.max_alloc)
        return plain(image).sub(self._mean).div_(self._std).as_subclass(Image)


class _Relayout(Transform):
    def __init__(self, max_alloc: int = MAX_ALLOC) -> None:
        self.max_alloc = check_max_alloc(max_alloc)


class ToChw(_Relayout):
    """To CHW memory (contiguous (C, H, W)): the layout of ``ToTensor``."""

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        if image.memory_layout == "chw":
            return image
        check_alloc(f"ToChw of {tuple(image.shape)}", image.numel() * image.element_size(), self.max_alloc)
        return plain(image).contiguous().as_subclass(Image)


class ToHwc(_Relayout):
    """To HWC memory (channels last)."""

    def apply(self, image: Any) -> Image:
        image = as_image(image)
        if image.memory_layout == "hwc" or image.shape[0] == 1:
            return image
        check_alloc(f"ToHwc of {tuple(image.shape)}", image.numel() * image.element_size(), self.max_alloc)
        return image.hwc.contiguous().permute(2, 0, 1).as_subclass(Image)


def float_normalize_into(out: np.ndarray, src: np.ndarray, normalize: Normalize, scale: bool = True) -> None:
    """ToFloat (``float(x) / 255`` with ``scale``) of the uint8 or float32 array ``src``, then ``normalize``, written
    into the float32 array ``out`` of the same shape (C, H, W) or (N, C, H, W), any strides.

    The element operations are ToFloat's and Normalize's in float32, each correctly rounded, so the values are
    theirs bit for bit; numpy's loops run without the GIL.
    """
    if src.dtype == np.uint8 and scale:
        np.divide(src, _255, out=out, dtype=np.float32)
    else:
        np.copyto(out, src)
    np.subtract(out, normalize._mean_np, out=out)
    np.divide(out, normalize._std_np, out=out)


class FloatNormalizeChw(Transform):
    """ToFloat, Normalize and ToChw in one step (``Compose`` uses it for that sequence), with PadTo before them.

    The values are the same, element for element (``float_normalize_into``): without padding, the uint8 data is
    put in CHW order (numpy's transposing copy, a few times faster than torch's for 3 channels), then converted
    and normalised in three passes over contiguous planes, written into the result (with PadTo, into its inner
    part; the padding gets the fill's value, computed once with the same operations as a padded pixel). All of it
    is numpy's loops on arrays of the result, without the GIL; torch's indexing, which would hold the GIL for tens
    of microseconds per band, is not used.

    The results' buffers are recycled (``_recycle.RecyclingPool``, up to ``POOL_BYTES`` kept): a result's memory is
    used again only once nothing holds the result, a view or an array of it any more.
    """

    POOL_BYTES = 256 * 1024 * 1024

    def __init__(self, to_float: ToFloat, normalize: Normalize, pad_to: Any = None) -> None:
        self.to_float, self.normalize, self.pad_to = to_float, normalize, pad_to
        self._pool = RecyclingPool(torch.float32, self.POOL_BYTES)
        self._fills: dict[tuple[int, float], np.ndarray] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_pool", "_fills")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pool = RecyclingPool(torch.float32, self.POOL_BYTES)
        self._fills = {}

    def apply(self, image: Any) -> Image:
        chw = plain(as_image(image))
        if chw.dtype != torch.uint8:
            raise ValueError(f"ToFloat takes uint8 images, got {chw.dtype}")
        c, h, w = chw.shape
        if c != len(self.normalize.mean):
            raise ValueError(f"Normalize has {len(self.normalize.mean)} channel values, the image has {c} channels")
        pad = self.pad_to
        left, top, right, bottom = pad.padding(h, w) if pad is not None else (0, 0, 0, 0)
        oh, ow = h + top + bottom, w + left + right
        check_alloc(f"ToFloat + Normalize of {(c, oh, ow)}", c * oh * ow * 4, self.to_float.max_alloc)
        out = self._pool.take((c, oh, ow))
        if oh == h and ow == w:
            src = np.ascontiguousarray(chw.numpy())  # CHW order (a copy only when the memory is HWC)
            float_normalize_into(out.numpy(), src, self.normalize, self.to_float.scale)
            return out.as_subclass(Image)
        o = out.numpy()
        fill = self._fill(c, pad.fill)
        for rows, cols in (  # the padding: top and bottom bands, then left and right of the image
            (slice(0, top), slice(None)),
            (slice(top + h, oh), slice(None)),
            (slice(top, top + h), slice(0, left)),
            (slice(top, top + h), slice(left + w, ow)),
        ):
            o[:, rows, cols] = fill  # numpy's indexing: a few microseconds each, torch's tens (with the GIL)
        src = np.ascontiguousarray(chw.numpy())
        float_normalize_into(o[:, top : top + h, left : left + w], src, self.normalize, self.to_float.scale)
        return out.as_subclass(Image)

    def _fill(self, c: int, fill: float) -> np.ndarray:
        """The (c, 1, 1) values of a padded pixel: ``fill`` as uint8, through the same operations."""
        key = (c, fill)
        values = self._fills.get(key)
        if values is None:
            values = np.empty((c, 1, 1), dtype=np.float32)
            float_normalize_into(values, np.full((c, 1, 1), np.uint8(fill)), self.normalize, self.to_float.scale)
            self._fills[key] = values
        return values
