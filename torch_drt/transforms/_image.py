"""Image: a CPU tensor with its layout, viewed without a copy by numpy (``__array__``) and DLPack."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch

__all__ = ["MAX_ALLOC", "MAX_SIDE", "Image", "TensorView", "as_image"]

MAX_SIDE = 16384
MAX_ALLOC = 256 * 1024 * 1024
Layout = Literal["hwc", "chw"]
_DTYPES = (torch.uint8, torch.float32)


class TensorView:
    """A CPU tensor seen by numpy (``__array__``) and DLPack without a copy.

    Each view is taken from a fresh ``tensor.view``, so the storage's use count tells whether any view is alive.
    """

    __slots__ = ()
    tensor: torch.Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape, in its layout."""
        return tuple(self.tensor.shape)

    @property
    def dtype(self) -> torch.dtype:
        """The element type."""
        return self.tensor.dtype

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self.tensor.view(self.tensor.shape).numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.tensor.view(self.tensor.shape).__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.tensor.__dlpack_device__()


class Image(TensorView):
    """An image: a contiguous uint8 or float32 CPU tensor in ``"hwc"`` or ``"chw"`` layout, 1-4 channels.

    ``np.asarray(image)``, ``torch.from_dlpack(image)`` and ``image.tensor`` view its data without a copy.

    Args:
        tensor: 3-D, in ``layout``.
        layout: ``"hwc"`` or ``"chw"``.
    """

    __slots__ = ("layout", "tensor")

    def __init__(self, tensor: torch.Tensor, layout: Layout = "hwc") -> None:
        self.tensor = tensor
        self.layout = layout

    @classmethod
    def from_array(cls, obj: Any, layout: Layout = "hwc") -> Image:
        """Bring a numpy array, a CPU tensor or anything ``np.asarray`` takes back in as an HWC image.

        The shape is (height, width) or, in ``layout``, (height, width, channels) / (channels, height, width),
        with 1, 3 or 4 channels (2 for grey + alpha) and Decode's default limits.

        Raises:
            TypeError: for a dtype other than uint8 or float32 (never converted) or a non-CPU tensor.
            ValueError: for another shape, channel count, or an image over the limits.
        """
        if layout not in ("hwc", "chw"):
            raise ValueError(f"{layout=} must be 'hwc' or 'chw'")
        if isinstance(obj, Image):
            tensor = obj.tensor if obj.layout == "hwc" else obj.tensor.permute(1, 2, 0)
            return cls(tensor.contiguous(), "hwc")
        if isinstance(obj, torch.Tensor):
            if obj.device.type != "cpu":
                raise TypeError(f"a tensor on {obj.device} cannot become an Image: move it with .cpu() first")
            tensor = obj.detach()
        else:
            arr = np.asarray(obj)
            if arr.dtype not in (np.uint8, np.float32):
                raise TypeError(f"images are uint8 or float32, got {arr.dtype} (it is never converted)")
            tensor = torch.from_numpy(np.ascontiguousarray(arr) if arr.flags.writeable else arr.copy())
        if tensor.dtype not in _DTYPES:
            raise TypeError(f"images are uint8 or float32, got {tensor.dtype} (it is never converted)")
        if tensor.dim() == 2:
            tensor = tensor.unsqueeze(-1)
        elif tensor.dim() == 3 and layout == "chw":
            tensor = tensor.permute(1, 2, 0)
        elif tensor.dim() != 3:
            raise ValueError(f"an image is 2-D or 3-D, got shape {tuple(tensor.shape)}")
        h, w, c = tensor.shape
        if c not in (1, 2, 3, 4):
            raise ValueError(f"an image has 1-4 channels, got {c} (shape {tuple(tensor.shape)} as {layout})")
        if h > MAX_SIDE or w > MAX_SIDE or tensor.numel() * tensor.element_size() > MAX_ALLOC:
            raise ValueError(f"image of {w}x{h}x{c} is over the limits ({MAX_SIDE} per side, {MAX_ALLOC} bytes)")
        return cls(tensor.contiguous(), "hwc")

    @property
    def hwc(self) -> torch.Tensor:
        """The data as (height, width, channels), a view."""
        return self.tensor if self.layout == "hwc" else self.tensor.permute(1, 2, 0)

    def __repr__(self) -> str:
        return f"Image(shape={self.shape}, dtype={self.dtype}, layout={self.layout!r})"


def as_image(obj: Any) -> Image:
    """An Image as it is, anything else through ``Image.from_array`` (HWC)."""
    return obj if isinstance(obj, Image) else Image.from_array(obj)
