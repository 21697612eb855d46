"""dataloader-rs's ``Image``, ``ImageBatch`` and ``ImageCollator``: arrays in the image's own layout.

torch_drt's ``Image`` is a (C, H, W) ``tv_tensors.Image`` whose ``np.asarray`` / ``torch.from_dlpack`` views are
(C, H, W) whatever its memory order. dataloader-rs's image is not a tensor: it has a layout, HWC unless ``ToChw``
made it CHW, and its array views are in that layout; its batches are views in the collator's layout ("NCHW" or
"NHWC"). These classes wrap torch_drt's (no copy) and give those views; ``tv_tensor`` is the torch_drt object.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np
import torch

from torch_drt.transforms import Image as _Image
from torch_drt.transforms import ImageBatch as _ImageBatch
from torch_drt.transforms import ImageCollator as _ImageCollator

__all__ = ["Image", "ImageBatch", "ImageCollator", "unwrap"]

Layout = Literal["hwc", "chw"]


class _Views:
    """``np.asarray(obj)`` and ``torch.from_dlpack(obj)`` as views of ``obj.tensor`` (CPU), without a copy."""

    __slots__ = ()
    WRITEABLE: bool = True

    @property
    def tensor(self) -> torch.Tensor:
        raise NotImplementedError

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the views."""
        return tuple(self.tensor.shape)

    @property
    def dtype(self) -> np.dtype:
        """``uint8`` or ``float32`` (numpy's)."""
        return np.dtype("uint8") if self.tensor.dtype == torch.uint8 else np.dtype("float32")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        view = self.tensor.numpy().view()
        if dtype is not None and np.dtype(dtype) != view.dtype:
            if copy is False:
                raise ValueError(f"a {view.dtype} image cannot be viewed as {np.dtype(dtype)} without a copy")
            return view.astype(dtype)
        if copy:
            return view.copy()
        view.flags.writeable = self.WRITEABLE
        return view

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self.tensor.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.tensor.__dlpack_device__()


class Image(_Views):
    """An image in dataloader-rs's sense: uint8 or float32, HWC (the default) or CHW (after ``ToChw``).

    ``np.asarray(image)`` is a read-only view and ``torch.from_dlpack(image)`` a view, both in ``layout``:
    (height, width, channels) or (channels, height, width). Transforms of
    ``torch_drt.compat.dataloader_rs.transforms`` return it when called directly; ``ImageCollator`` takes it.
    ``tv_tensor`` is the same data as torch_drt's (C, H, W) ``Image`` (what torch_drt's own transforms take);
    ``shape`` is (height, width, channels) or (channels, height, width).
    """

    __slots__ = ("_image", "_layout", "_view")
    WRITEABLE = False

    def __init__(self, image: _Image, layout: Layout) -> None:
        self._image, self._layout = image, layout
        self._view: torch.Tensor | None = None

    @classmethod
    def from_array(cls, obj: Any, layout: Layout = "hwc") -> Image:
        """An HWC image holding a copy of ``obj``: a numpy array, a CPU tensor or anything ``np.asarray`` takes.

        The shape is (height, width) or, in ``layout``, (height, width, channels) / (channels, height, width),
        with 1, 3 or 4 channels, at most 16384 per side and 256 MiB.

        Raises:
            TypeError: for a dtype other than uint8 or float32 (never converted) or a non-CPU tensor.
            ValueError: for another layout, shape or channel count, or an image over the limits.
        """
        if layout not in ("hwc", "chw"):
            raise ValueError(f"{layout=} must be 'hwc' or 'chw'")
        image = _Image.from_array(obj, layout=layout)  # an Image of this module: its array view, read in `layout`
        if image.shape[0] == 2:
            raise ValueError(f"an image has 1, 3 or 4 channels, got 2 (shape {tuple(image.shape)} as CHW)")
        hwc = image.hwc
        owned = torch.empty(hwc.shape, dtype=hwc.dtype)  # a copy of its own, contiguous HWC, as dataloader-rs's
        owned.copy_(hwc)
        return cls(owned.permute(2, 0, 1).as_subclass(_Image), "hwc")

    @property
    def layout(self) -> Layout:
        """``"hwc"`` or ``"chw"``: the order of ``shape`` and of the array views."""
        return self._layout

    @property
    def tensor(self) -> torch.Tensor:
        """The data as a plain tensor in ``layout`` (a view; made contiguous in that layout once, if it is not)."""
        if self._view is None:
            chw = self._image.as_subclass(torch.Tensor)
            view = chw.permute(1, 2, 0) if self._layout == "hwc" else chw
            self._view = view if view.is_contiguous() else view.contiguous()
        return self._view

    @property
    def tv_tensor(self) -> _Image:
        """The image as torch_drt's (C, H, W) ``Image`` (a ``tv_tensors.Image``; no copy)."""
        return self._image

    def __repr__(self) -> str:
        return f"Image(shape={self.shape}, dtype={self.dtype}, layout={self._layout!r})"


class ImageBatch(_Views):
    """A batch in one buffer: ``np.asarray(batch)`` and ``torch.from_dlpack(batch)`` are writable views of it in
    ``layout`` ("NCHW": (N, C, H, W); "NHWC": (N, H, W, C)), without a copy, keeping the buffer alive.
    ``tv_tensor`` is torch_drt's (N, C, H, W) ``ImageBatch`` over the same buffer (what ``model(...)`` takes);
    ``shape`` is (N, C, H, W) or (N, H, W, C)."""

    __slots__ = ("_batch",)

    def __init__(self, batch: _ImageBatch) -> None:
        self._batch = batch

    @property
    def layout(self) -> str:
        """``"NCHW"`` or ``"NHWC"``."""
        return self._batch.memory_layout

    @property
    def tensor(self) -> torch.Tensor:
        """The buffer as a plain tensor in ``layout`` (a view)."""
        return self._batch.tensor

    @property
    def tv_tensor(self) -> _ImageBatch:
        """The batch as torch_drt's (N, C, H, W) ``ImageBatch`` (no copy)."""
        return self._batch

    def __len__(self) -> int:
        return self._batch.shape[0]

    def __repr__(self) -> str:
        return f"ImageBatch(shape={self.shape}, dtype={self.dtype}, layout={self.layout!r})"


def unwrap(obj: Any) -> Any:
    """torch_drt's image for an ``Image`` of this module; anything else as it is."""
    return obj._image if isinstance(obj, Image) else obj


class ImageCollator:
    """dataloader-rs's ``ImageCollator``: one ``ImageBatch`` per batch, in ``layout`` ("NCHW" or "NHWC").

    Items are ``Image``s (or torch_drt images, or HWC arrays); ``(image, meta, ...)`` tuples give ``(batch,
    [meta, ...], ...)``, each further field as the plain list of the items' values. ``dtype`` (``"uint8"`` or
    ``"float32"``) checks the items' type; images of different shapes fail the batch (``ValueError``);
    ``buffers=n`` reuses up to n buffers of dropped batches. torch_drt's ``max_alloc`` and ``normalize``
    (``ToFloat`` + ``Normalize`` while collating) are accepted too.
    """

    __signature__ = inspect.signature(_ImageCollator)  # its arguments: layout, dtype, buffers, max_alloc, normalize

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._collator = _ImageCollator(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self._collator)

    def __call__(self, items: Sequence[Any]) -> ImageBatch | tuple[Any, ...]:
        if not items:
            raise ValueError("ImageCollator got an empty batch")  # as dataloader-rs's
        if not isinstance(items[0], tuple):
            return self._batch([unwrap(item) for item in items])
        fields = len(items[0])
        if any(not isinstance(item, tuple) or len(item) != fields for item in items):
            raise ValueError(f"the items of one batch must all be {fields}-tuples or all images")
        batch = self._batch([unwrap(item[0]) for item in items])
        return (batch, *([item[k] for item in items] for k in range(1, fields)))

    def _batch(self, images: list[Any]) -> ImageBatch:
        # images (none a tuple, at least one): torch_drt's collator answers with the batch itself
        return ImageBatch(cast(_ImageBatch, self._collator(images)))
