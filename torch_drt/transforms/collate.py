"""ImageCollator: a batch of images written into one contiguous buffer, optionally reused."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Literal

import torch

from torch_drt.transforms._image import TensorView, as_image

__all__ = ["ImageBatch", "ImageCollator"]

_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, None: None}


def _storage_uses(tensor: torch.Tensor) -> int | None:
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    return None if use_count is None else use_count(tensor.untyped_storage()._cdata)


class ImageBatch(TensorView):
    """A batch in one buffer. ``np.asarray(batch)`` and ``torch.from_dlpack(batch)`` are writable views of it
    (without a copy) that keep it alive; ``batch.tensor`` is the buffer itself."""

    __slots__ = ("__weakref__", "_pool", "layout", "tensor")

    def __init__(self, tensor: torch.Tensor, layout: str, pool: _BufferPool | None = None) -> None:
        self.tensor, self.layout, self._pool = tensor, layout, pool

    def __len__(self) -> int:
        return self.tensor.shape[0]

    def __reduce__(self):
        # Pickled (sent to another process, where torch moves the buffer to shared memory): the buffer now
        # belongs to the receiver, so it must never go back to this side's pool.
        self._pool = None
        return (ImageBatch, (self.tensor, self.layout))

    def __del__(self) -> None:
        if self._pool is not None:
            self._pool.give_back(self.tensor)

    def __repr__(self) -> str:
        return f"ImageBatch(shape={self.shape}, dtype={self.dtype}, layout={self.layout!r})"


class _BufferPool:
    """Buffers of dropped batches, reused once no view of them is alive (never waited for)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def give_back(self, tensor: torch.Tensor) -> None:
        with self._lock:
            if len(self._free) < self.size:
                self._free.append(tensor)

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        with self._lock:
            for i, t in enumerate(self._free):
                # in use by us: the list entry and the storage lookup itself; more means a live view
                if t.shape == shape and t.dtype == dtype and _storage_uses(t) == 2:
                    return self._free.pop(i)
            if len(self._free) >= self.size:
                self._free.pop(0)  # make room for buffers of the shape in use now
        return None


class ImageCollator:
    """Collate images (``Image``, HWC arrays or tensors) into one ``ImageBatch``.

    Items that are ``(image, extra)`` pairs give ``(batch, [extras])``.

    Args:
        layout: ``"NCHW"`` or ``"NHWC"``.
        dtype: ``"uint8"`` or ``"float32"`` to check the items' type; None accepts either (all alike).
        buffers: reuse the buffers of up to this many dropped batches (never waits for one).

    Raises:
        ValueError: when the images differ in shape or type, or one is not of ``dtype``.
    """

    def __init__(self, layout: Literal["NCHW", "NHWC"] = "NCHW", dtype: str | None = None, buffers: int = 0) -> None:
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f"{layout=} must be 'NCHW' or 'NHWC'")
        if dtype not in _DTYPES:
            raise ValueError(f"{dtype=} must be 'uint8', 'float32' or None")
        if buffers < 0:
            raise ValueError(f"{buffers=} must be >= 0")
        self.layout, self.dtype, self.buffers = layout, dtype, buffers
        self._pool = _BufferPool(buffers) if buffers else None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pool = _BufferPool(self.buffers) if self.buffers else None

    def __call__(self, items: Sequence[Any]) -> ImageBatch | tuple[ImageBatch, list[Any]]:
        if not items:
            raise ValueError("ImageCollator got an empty batch")
        pairs = isinstance(items[0], tuple) and len(items[0]) == 2
        images = [as_image(i[0] if pairs else i) for i in items]
        extras = [i[1] for i in items] if pairs else None
        first = images[0]
        want = _DTYPES[self.dtype]
        if want is not None and first.dtype != want:
            raise ValueError(f"ImageCollator(dtype={self.dtype!r}) got a {first.dtype} image (item 0)")
        hwc0 = first.hwc.shape
        for k, im in enumerate(images[1:], 1):
            if im.dtype != first.dtype or im.hwc.shape != hwc0:
                raise ValueError(
                    f"images of one batch must share shape and type: item 0 is {tuple(hwc0)} {first.dtype}, "
                    f"item {k} is {tuple(im.hwc.shape)} {im.dtype} (HWC)"
                )
        h, w, c = hwc0
        shape = (len(images), c, h, w) if self.layout == "NCHW" else (len(images), h, w, c)
        buffer = self._pool.take(shape, first.dtype) if self._pool is not None else None
        if buffer is None:
            buffer = torch.empty(shape, dtype=first.dtype)
        for k, im in enumerate(images):
            src = im.tensor
            if self.layout == "NCHW":
                buffer[k].copy_(src if im.layout == "chw" else src.permute(2, 0, 1))
            else:
                buffer[k].copy_(src if im.layout == "hwc" else src.permute(1, 2, 0))
        batch = ImageBatch(buffer, self.layout, self._pool)
        return (batch, extras) if pairs else batch
