"""Moving batch tensors from loading processes to the trainer through a shared-memory ring per worker.

torch sends each tensor a worker returns through a fresh shared-memory segment and a file-descriptor hand-off,
about a millisecond per batch in the receiving process. Here each worker writes large tensors into a ring of
slots in one file under /dev/shm that the receiver maps once; a tensor travels as a small descriptor and is
copied out on arrival. A slot is reused only after ``slots - 1`` later batches of the same worker, and a worker is
never more than ``prefetch_factor`` batches ahead of what the receiver has taken, so ``slots`` must exceed it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import uuid
from dataclasses import dataclass
from multiprocessing.util import Finalize
from typing import Any

import torch

__all__ = ["RingReader", "RingWriter", "SharedTensor"]

_MIN_BYTES = 64 * 1024  # smaller tensors travel the ordinary way
_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None


@dataclass(frozen=True)
class SharedTensor:
    """Where a tensor lies in a worker's ring: file, byte offset, shape and dtype."""

    path: str
    offset: int
    shape: tuple[int, ...]
    dtype: torch.dtype


class RingWriter:
    """The worker side: ``pack(batch)`` moves the batch's large CPU tensors into the next slot."""

    def __init__(self, slots: int) -> None:
        if slots < 2:
            raise ValueError(f"{slots=} must be >= 2")
        self.slots = slots
        self._slot = 0
        self._slot_bytes = 0
        self._path: str | None = None
        self._map: mmap.mmap | None = None

    def _ensure(self, nbytes: int) -> None:
        if nbytes <= self._slot_bytes:
            return
        self._slot_bytes = max(nbytes, 2 * self._slot_bytes)
        if self._map is not None:
            self._map.close()
        self._path = os.path.join(_SHM_DIR or "/tmp", f"torch_drt_ring_{os.getpid()}_{uuid.uuid4().hex[:8]}")
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        # multiprocessing runs its finalizers when a worker exits (atexit would not): no file outlives it
        Finalize(None, _unlink_quietly, args=(self._path,), exitpriority=0)
        try:
            os.ftruncate(fd, self._slot_bytes * self.slots)
            self._map = mmap.mmap(fd, self._slot_bytes * self.slots)
        finally:
            os.close(fd)

    def _tensors(self, obj: Any, out: list[torch.Tensor]) -> None:
        if isinstance(obj, torch.Tensor):
            if obj.device.type == "cpu" and obj.numel() * obj.element_size() >= _MIN_BYTES and not obj.is_sparse:
                out.append(obj)
        elif isinstance(obj, list | tuple):
            for x in obj:
                self._tensors(x, out)
        elif isinstance(obj, dict):
            for x in obj.values():
                self._tensors(x, out)

    def pack(self, batch: Any) -> Any:
        """The batch with its large tensors replaced by ``SharedTensor`` descriptors (their data is copied)."""
        if _SHM_DIR is None:
            return batch
        tensors: list[torch.Tensor] = []
        self._tensors(batch, tensors)
        if not tensors:
            return batch
        sizes = [t.numel() * t.element_size() for t in tensors]
        self._ensure(sum(-(-s // 64) * 64 for s in sizes))
        base = self._slot * self._slot_bytes
        self._slot = (self._slot + 1) % self.slots
        placed: dict[int, SharedTensor] = {}
        offset = base
        for t, size in zip(tensors, sizes):
            target = torch.frombuffer(self._map, dtype=t.dtype, count=t.numel(), offset=offset).view(t.shape)
            target.copy_(t)
            placed[id(t)] = SharedTensor(self._path, offset, tuple(t.shape), t.dtype)
            offset += -(-size // 64) * 64
        return _replace(batch, placed)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _replace(obj: Any, placed: dict[int, Any]) -> Any:
    if isinstance(obj, torch.Tensor):
        return placed.get(id(obj), obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_replace(x, placed) for x in obj))
    if isinstance(obj, list | tuple):
        return type(obj)(_replace(x, placed) for x in obj)
    if isinstance(obj, dict):
        return type(obj)((k, _replace(v, placed)) for k, v in obj.items())
    return obj


class RingReader:
    """The receiving side: ``unpack(batch)`` copies descriptors' tensors out of the mapped rings."""

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap] = {}

    def _mapping(self, path: str) -> mmap.mmap:
        m = self._maps.get(path)
        if m is None:
            fd = os.open(path, os.O_RDONLY)
            try:
                m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            os.unlink(path)  # the writer keeps its mapping; nothing is left behind in /dev/shm
            self._maps[path] = m
        return m

    def _load(self, d: SharedTensor) -> torch.Tensor:
        count = 1
        for s in d.shape:
            count *= s
        out = torch.empty(d.shape, dtype=d.dtype)  # the slot will be reused: the batch gets its own memory
        if count:
            src = memoryview(self._mapping(d.path))[d.offset : d.offset + count * out.element_size()]
            out.view(-1).view(torch.uint8).numpy()[:] = src
        return out

    def unpack(self, obj: Any) -> Any:
        """The batch with every ``SharedTensor`` replaced by a tensor of its own."""
        if isinstance(obj, SharedTensor):
            return self._load(obj)
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return type(obj)(*(self.unpack(x) for x in obj))
        if isinstance(obj, list | tuple):
            return type(obj)(self.unpack(x) for x in obj)
        if isinstance(obj, dict):
            return type(obj)((k, self.unpack(v)) for k, v in obj.items())
        return obj

    def close(self) -> None:
        """Unmap every ring."""
        for m in self._maps.values():
            m.close()
        self._maps.clear()
