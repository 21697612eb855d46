"""Recycled output buffers: a transform's results handed out again once nothing but the pool holds their memory.

Why. A float32 224 x 224 RGB result is 602 KB. Allocated fresh for every image and freed a batch at a time (after
collation), that memory goes back to the system (glibc trims the heap, or unmaps the chunk) and the next image's
buffer is faulted in again page by page: 147 page faults for each image, about a third of the CPU time of the PNG
pipeline, in the kernel and partly under the GIL (the unmapping runs where the tensor is freed). A recycled buffer
is already mapped.

When a buffer is free. Every tensor, view, numpy array or DLPack capsule of a buffer holds its storage, and torch
counts the holders (``_storage_Use_Count``); a buffer is free when the pool's own tensor is the only one. A buffer
whose storage was moved to shared memory (a tensor pickled to another process: the receiver maps the same memory)
is never handed out again.
"""

from __future__ import annotations

import threading
from collections import deque

import torch

_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)


def storage_uses(tensor: torch.Tensor) -> int | None:
    """Holders of ``tensor``'s storage, this lookup's one included (None where torch does not count them)."""
    return None if _USE_COUNT is None else _USE_COUNT(tensor.untyped_storage()._cdata)


class RecyclingPool:
    """Buffers of one dtype, handed out oldest first once free, up to ``max_bytes`` of them kept.

    ``take`` looks at the oldest buffer only (results are freed in about the order they were made, a batch at a
    time): a free one of the same shape is handed out again, anything else means a new buffer, kept while the
    pool is under ``max_bytes``. So a pool grows to what is in flight at once (a batch per worker, and those
    being made) and no further. Thread-safe; a buffer counts as in use from the moment ``take`` returns it.

    Args:
        dtype: the buffers' element type.
        max_bytes: the most memory the pool keeps.
    """

    def __init__(self, dtype: torch.dtype, max_bytes: int) -> None:
        self.dtype, self.max_bytes = dtype, max_bytes
        self._buffers: deque[torch.Tensor] = deque()
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A buffer of ``shape`` (uninitialised contents: the caller writes every element)."""
        with self._lock:
            buffers = self._buffers
            if buffers and _USE_COUNT is not None:
                oldest = buffers[0]
                free = _USE_COUNT(oldest.untyped_storage()._cdata) == 2  # the pool's tensor and this lookup
                if free and oldest.shape == shape and not oldest.untyped_storage().is_shared():
                    buffers.rotate(-1)
                    return oldest.view(shape)
                if free:  # another shape (image sizes vary), or another process maps it: make room
                    buffers.popleft()
                    self._bytes -= oldest.nbytes
                elif self._bytes + oldest.nbytes > self.max_bytes:  # in use, at the limit: to the back, so one
                    buffers.rotate(-1)  # held for long blocks nothing
            buffer = torch.empty(shape, dtype=self.dtype)
            if _USE_COUNT is not None and self._bytes + buffer.nbytes <= self.max_bytes:
                buffers.append(buffer)
                self._bytes += buffer.nbytes
            return buffer.view(shape)
