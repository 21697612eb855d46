"""Image: a ``torchvision.tv_tensors.Image`` (a (C, H, W) CPU tensor) whose memory is HWC or CHW; memory limits."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from PIL import Image as PILImage
from torchvision import tv_tensors

MAX_SIDE = 16384
MAX_ALLOC = 256 * 1024 * 1024  # the most one transform may allocate for one image, intermediates included
MAX_BATCH_ALLOC = 4 * 1024 * 1024 * 1024  # the most ImageCollator may allocate for one batch
Layout = Literal["hwc", "chw"]
_DTYPES = (torch.uint8, torch.float32)


def check_alloc(what: str, nbytes: int, max_alloc: int) -> None:
    """Refuse, before allocating, work that would allocate more than ``max_alloc`` bytes.

    Raises:
        ValueError: naming ``what``, the bytes it needs and the limit.
    """
    if nbytes > max_alloc:
        raise ValueError(
            f"{what} would allocate {nbytes:,} bytes, over max_alloc={max_alloc:,}; refused before allocating"
        )


def check_max_alloc(max_alloc: int) -> int:
    """``max_alloc`` validated: an int > 0."""
    if not isinstance(max_alloc, int) or isinstance(max_alloc, bool) or max_alloc < 1:
        raise ValueError(f"{max_alloc=} must be an int > 0")
    return max_alloc


class Image(tv_tensors.Image):
    """An image: a uint8 or float32 CPU tensor of shape (channels, height, width), 1-4 channels.

    It is a ``torchvision.tv_tensors.Image``, so torchvision's v2 transforms act on it and any tensor code takes
    it. Its memory is either HWC (channels last: what decoders and Pillow produce, and the default) or CHW
    (contiguous); ``memory_layout`` says which, ``hwc`` views it as (height, width, channels) and ``tensor`` views
    it in memory order, all without a copy. ``np.asarray(image)`` and ``torch.from_dlpack(image)`` are (C, H, W)
    views like for any tensor; ``image.hwc.numpy()`` is the (H, W, C) array Pillow and numpy code expect.
    """

    @classmethod
    def from_array(cls, obj: Any, layout: Layout | None = None) -> Image:
        """Bring a numpy array, a PIL image, a CPU tensor or anything ``np.asarray`` takes in as an Image.

        The shape is (height, width) or, in ``layout``, (height, width, channels) / (channels, height, width),
        with 1, 3 or 4 channels (2 for grey + alpha). ``layout`` defaults to ``"chw"`` for tensors (torch's
        convention) and ``"hwc"`` for everything else (numpy's and Pillow's). The data is viewed, not copied, when
        it is a contiguous CPU tensor or a writable numpy array. A PIL image gives what torchvision v2's
        ``ToImage`` gives (its own channels: a palette image is its indices, CMYK four channels; ``Decode`` converts
        as for decoding instead).

        Raises:
            TypeError: for a dtype other than uint8 or float32 (never converted) or a non-CPU tensor.
            ValueError: for another shape, channel count, or an image over ``MAX_SIDE`` or ``MAX_ALLOC``.
        """
        if layout not in (None, "hwc", "chw"):
            raise ValueError(f"{layout=} must be 'hwc', 'chw' or None")
        if isinstance(obj, Image):
            return obj
        if isinstance(obj, torch.Tensor):
            if obj.device.type != "cpu":
                raise TypeError(f"a tensor on {obj.device} cannot become an Image: move it with .cpu() first")
            tensor = obj.detach().as_subclass(torch.Tensor)
            layout = layout or "chw"
        else:
            pil = isinstance(obj, PILImage.Image)
            arr = np.array(obj) if pil else np.asarray(obj)  # a PIL image: one writable copy
            if arr.dtype not in (np.uint8, np.float32):
                what = f"a PIL image of mode {obj.mode!r} ({arr.dtype})" if pil else str(arr.dtype)
                raise TypeError(f"images are uint8 or float32, got {what} (it is never converted)")
            tensor = torch.from_numpy(np.ascontiguousarray(arr) if arr.flags.writeable else arr.copy())
            layout = layout or "hwc"
        if tensor.dtype not in _DTYPES:
            raise TypeError(f"images are uint8 or float32, got {tensor.dtype} (it is never converted)")
        if tensor.dim() == 2:
            tensor = tensor.unsqueeze(0 if layout == "chw" else -1)
        elif tensor.dim() != 3:
            raise ValueError(f"an image is 2-D or 3-D, got shape {tuple(tensor.shape)}")
        chw = tensor if layout == "chw" else tensor.permute(2, 0, 1)
        c, h, w = chw.shape
        if c not in (1, 2, 3, 4):
            raise ValueError(f"an image has 1-4 channels, got {c} (shape {tuple(tensor.shape)} as {layout})")
        if h > MAX_SIDE or w > MAX_SIDE or chw.numel() * chw.element_size() > MAX_ALLOC:
            raise ValueError(f"image of {w}x{h}x{c} is over the limits ({MAX_SIDE} per side, {MAX_ALLOC} bytes)")
        if not (chw.is_contiguous() or chw.permute(1, 2, 0).is_contiguous()):
            chw = chw.contiguous()
        return chw.as_subclass(cls)

    @property
    def memory_layout(self) -> Layout:
        """``"hwc"`` when the memory is (height, width, channels), else ``"chw"`` (always for one channel)."""
        t = plain(self)
        return "hwc" if t.shape[0] > 1 and t.stride(0) == 1 else "chw"

    @property
    def hwc(self) -> torch.Tensor:
        """The data as a plain (height, width, channels) tensor, a view."""
        return plain(self).permute(1, 2, 0)

    @property
    def tensor(self) -> torch.Tensor:
        """The data as a plain tensor in memory order, (H, W, C) or (C, H, W), a contiguous view."""
        t = plain(self)
        return t.permute(1, 2, 0) if t.shape[0] > 1 and t.stride(0) == 1 else t

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"Image(shape={tuple(self.shape)}, dtype={self.dtype}, memory_layout={self.memory_layout!r})"


def to_uint8(t: torch.Tensor) -> torch.Tensor:
    """``t.to(torch.uint8)`` for a float32 tensor of values in [0, 256): the same truncation, through numpy's
    cast (several times faster than torch's on CPU, without the GIL), keeping the memory layout."""
    return torch.from_numpy(t.numpy().astype(np.uint8))


def plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a plain ``torch.Tensor`` (a view: no copy)."""
    return t if type(t) is torch.Tensor else t.as_subclass(torch.Tensor)


def from_hwc(hwc: torch.Tensor) -> Image:
    """An Image over a plain (H, W, C) tensor, made contiguous (HWC memory) if it is not."""
    return hwc.contiguous().permute(2, 0, 1).as_subclass(Image)


def from_chw(chw: torch.Tensor) -> Image:
    """An Image over a plain (C, H, W) tensor, made contiguous (CHW memory) if it is not."""
    return chw.contiguous().as_subclass(Image)


def image_if_pil(obj: Any) -> Any:
    """A PIL image as an Image (what ``ToImage`` gives), anything else as it is."""
    return Image.from_array(obj) if isinstance(obj, PILImage.Image) else obj


def as_image(obj: Any) -> Image:
    """An Image as it is, anything else through ``Image.from_array`` (tensors as CHW, arrays as HWC)."""
    return obj if type(obj) is Image else Image.from_array(obj)
