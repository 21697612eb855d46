"""ImageCollator: a batch of images written into one contiguous buffer, optionally reused."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torchvision import tv_tensors

from torch_drt import _threads
from torch_drt.transforms._image import MAX_BATCH_ALLOC, as_image, check_alloc, check_max_alloc, plain
from torch_drt.transforms.dtype import Normalize, float_normalize_into

_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, None: None}


def _storage_uses(tensor: torch.Tensor) -> int | None:
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    return None if use_count is None else use_count(tensor.untyped_storage()._cdata)


class ImageBatch(tv_tensors.Image):
    """A batch of images in one buffer: a (N, C, H, W) ``tv_tensors.Image``, so ``model(batch)`` takes it.

    ``memory_layout`` is ``"NCHW"`` (contiguous) or ``"NHWC"`` (channels last, which convolutions take as it is).
    ``np.asarray(batch)``, ``torch.from_dlpack(batch)`` and ``batch.tensor`` (the buffer in memory order) are
    views of it, without a copy.
    """

    @property
    def memory_layout(self) -> str:
        """``"NCHW"`` or ``"NHWC"``."""
        return "NCHW" if plain(self).is_contiguous() else "NHWC"

    @property
    def tensor(self) -> torch.Tensor:
        """The buffer as a plain tensor in memory order: (N, C, H, W) or (N, H, W, C)."""
        t = plain(self)
        return t if t.is_contiguous() else t.permute(0, 2, 3, 1)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Pickled to another process, torch moves the buffer to shared memory, which the receiver then holds:
        # it must never be written again on this side.
        pool = self.__dict__.pop("_pool", None)
        if pool is not None:
            pool.forget(self)
        return super().__reduce_ex__(protocol)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"ImageBatch(shape={tuple(self.shape)}, dtype={self.dtype}, memory_layout={self.memory_layout!r})"


class _BufferPool:
    """Up to ``size`` buffers, each handed out again once nothing but the pool holds its memory.

    A buffer's memory is in use while any tensor, view or numpy array of it is alive (torch counts the users of
    its storage); the pool never waits for one.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._buffers: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def forget(self, tensor: torch.Tensor) -> None:
        """Never hand out ``tensor``'s buffer again."""
        ptr = plain(tensor).untyped_storage().data_ptr()
        with self._lock:
            self._buffers = [b for b in self._buffers if b.untyped_storage().data_ptr() != ptr]

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A free buffer of ``shape`` and ``dtype``, or a new one (kept when there is room).

        What it returns is a view, made under the lock: the buffer counts as in use from that moment, so a
        second thread's ``take`` cannot hand it out again before the first has wrapped it in its batch.
        """
        with self._lock:
            free = [b for b in self._buffers if _storage_uses(b) == 2]  # the pool's tensor and this lookup
            for b in free:
                if b.shape == shape and b.dtype == dtype:
                    return b.view(shape)
            buffer = torch.empty(shape, dtype=dtype)
            if len(self._buffers) >= self.size and free:
                self._buffers = [b for b in self._buffers if b is not free[0]]  # room for the shape in use now
            if len(self._buffers) < self.size:
                self._buffers.append(buffer)
            return buffer.view(shape)


class ImageCollator:
    """Collate images (``Image``, tensors as CHW, numpy arrays as HWC) into one ``ImageBatch``.

    It writes the batch on the calling thread only, without torch's intra-op threads, as the transforms run.
    Items that are ``(image, target, ...)`` tuples give ``(batch, targets, ...)``, each further field collated by
    torch's ``default_collate`` (ints become an int64 tensor, dicts a dict of batches). No items (a padded rank's
    last batch under ``drop_last=False``) give ``[]``, as the loader's default collate does.

    Args:
        layout: ``"NCHW"`` or ``"NHWC"``: the buffer's memory order (the batch's shape is (N, C, H, W) either way).
        dtype: ``"uint8"`` or ``"float32"`` to check the items' type; None accepts either (all alike).
        buffers: reuse up to this many buffers once no view of them is alive (never waits for one).
        max_alloc: the largest buffer, in bytes, it allocates.
        normalize: ``(mean, std)``: ``ToFloat`` (uint8 items) then ``Normalize(mean, std)`` while collating, with
            their values, written straight into a float32 batch (no float copy of each image is made).

    Raises:
        ValueError: when the images differ in shape or type, one is not of ``dtype``, or the batch is over
            ``max_alloc``.
    """

    def __init__(
        self,
        layout: Literal["NCHW", "NHWC"] = "NCHW",
        dtype: str | None = None,
        buffers: int = 0,
        max_alloc: int = MAX_BATCH_ALLOC,
        normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    ) -> None:
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f"{layout=} must be 'NCHW' or 'NHWC'")
        if dtype not in _DTYPES:
            raise ValueError(f"{dtype=} must be 'uint8', 'float32' or None")
        if not isinstance(buffers, int) or buffers < 0:
            raise ValueError(f"{buffers=} must be an int >= 0")
        self.layout, self.dtype, self.buffers = layout, dtype, buffers
        self.max_alloc = check_max_alloc(max_alloc)
        self.normalize = None if normalize is None else Normalize(*normalize)
        self._pool = _BufferPool(buffers) if buffers else None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pool = _BufferPool(self.buffers) if self.buffers else None

    def __repr__(self) -> str:
        return (
            f"ImageCollator(layout={self.layout!r}, dtype={self.dtype!r}, buffers={self.buffers}, "
            f"max_alloc={self.max_alloc}" + ("" if self.normalize is None else
                                             f", normalize=({self.normalize.mean}, {self.normalize.std})") + ")"
        )

    def __call__(self, items: Sequence[Any]) -> ImageBatch | tuple[Any, ...] | list[Any]:
        if not items:  # a padded rank's last batch: ``[]``, as the loader's default collate gives
            return []
        fields = len(items[0]) if isinstance(items[0], tuple) else 0
        if fields and any(not isinstance(i, tuple) or len(i) != fields for i in items):
            raise ValueError(f"the items of one batch must all be {fields}-tuples or all images")
        images = [plain(as_image(i[0] if fields else i)) for i in items]
        first = images[0]
        want = _DTYPES[self.dtype]
        if want is not None and first.dtype != want:
            raise ValueError(f"ImageCollator(dtype={self.dtype!r}) got a {first.dtype} image (item 0)")
        for k, im in enumerate(images[1:], 1):
            if im.dtype != first.dtype or im.shape != first.shape:
                raise ValueError(
                    f"images of one batch must share shape and type: item 0 is {tuple(first.shape)} {first.dtype}, "
                    f"item {k} is {tuple(im.shape)} {im.dtype} (CHW)"
                )
        threads = _threads.single_thread()  # the loader's threads are the parallelism, as for the transforms
        try:
            batch = self._fill(images)
        finally:
            _threads.restore(threads)
        if self._pool is not None:
            batch._pool = self._pool
        if not fields:
            return batch
        from torch.utils.data import default_collate

        return (batch, *(default_collate([i[k] for i in items]) for k in range(1, fields)))

    def _fill(self, images: list[torch.Tensor]) -> ImageBatch:
        """The batch buffer (from the pool, or new) with the images written in."""
        first = images[0]
        c, h, w = first.shape
        n = len(images)
        dtype = first.dtype if self.normalize is None else torch.float32
        nbytes = n * first.numel() * dtype.itemsize
        check_alloc(f"a batch of {n} x {tuple(first.shape)} {dtype}", nbytes, self.max_alloc)
        shape = (n, c, h, w) if self.layout == "NCHW" else (n, h, w, c)
        pool = self._pool
        buffer = pool.take(shape, dtype) if pool is not None else torch.empty(shape, dtype=dtype)
        nchw = buffer if self.layout == "NCHW" else buffer.permute(0, 3, 1, 2)
        if self.normalize is None:
            out = nchw.numpy()
            for k, im in enumerate(images):  # numpy's copy: without the GIL, and without torch's indexing cost
                out[k] = im.numpy()
        else:
            if c != len(self.normalize.mean):
                raise ValueError(f"normalize has {len(self.normalize.mean)} channel values, the images have {c}")
            out = nchw.numpy()
            for k, im in enumerate(images):  # each image finished while it is in cache, without the GIL
                float_normalize_into(out[k], im.numpy(), self.normalize)
        return nchw.as_subclass(ImageBatch)

