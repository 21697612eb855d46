"""Shared-memory batch transport: worker processes hand large tensors over through per-worker rings of slots.

torch sends each tensor a worker process returns through a fresh shared-memory segment and a file-descriptor
hand-off, about a millisecond per batch in the receiving process. Here each worker writes the large CPU tensors
of a batch into a slot of a ring file under /dev/shm that the receiver maps once; the tensors travel as small
``SharedTensor`` descriptors and are copied out on arrival, into pinned memory when asked (so pinning happens
after unpacking, in one copy).

The receiver owns the slots: it names the slot with each task and frees it once the result is unpacked (or
discarded), so a slot is never rewritten while its batch is unread. A task without a free slot, a batch without
large tensors, or a ring that cannot be allocated (``/dev/shm`` full: ``posix_fallocate`` fails) travels the
ordinary way. Ring files are named ``torch_drt_ring_<receiver pid>_<worker uid>_<n>``; the receiver unlinks each
once mapped, and the files of a dead worker or a closed pool.
"""

from __future__ import annotations

import contextlib
import glob
import mmap
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.util import Finalize
from typing import Any

import numpy as np
import torch

_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None
_ALIGN = 64


@dataclass(frozen=True)
class SharedMemoryTransport:
    """Settings of the transport stage of a process pool.

    Args:
        slots: ring slots per worker (the receiver hands them out; more tasks than slots travel the ordinary way);
            None lets ``OrderedMapper`` size it from its tasks in flight.
        min_bytes: smaller tensors travel the ordinary way.
        pin: unpack into pinned memory (CUDA only).
    """

    slots: int | None = None
    min_bytes: int = 64 * 1024
    pin: bool = False

    @property
    def available(self) -> bool:
        """Whether this machine has a shared-memory directory to put rings in."""
        return _SHM_DIR is not None


@dataclass(frozen=True)
class SharedTensor:
    """Where a tensor lies in a worker's ring: file, byte offset, shape and dtype."""

    path: str
    offset: int
    shape: tuple[int, ...]
    dtype: torch.dtype


def ring_prefix(receiver_pid: int, worker_uid: int) -> str:
    """The path prefix of one worker's ring files."""
    return os.path.join(_SHM_DIR or "/tmp", f"torch_drt_ring_{receiver_pid}_{worker_uid}_")


def unlink_rings(prefix: str) -> None:
    """Remove every ring file of one worker (after it died or its pool closed)."""
    for path in glob.glob(glob.escape(prefix) + "*"):
        _unlink_quietly(path)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


class RingWriter:
    """The worker side: ``pack(batch, slot)`` moves the batch's large CPU tensors into ``slot`` of its ring."""

    def __init__(self, transport: SharedMemoryTransport, prefix: str) -> None:
        self.transport = transport
        self.prefix = prefix
        self._files = 0
        self._slot_bytes = 0
        self._path: str | None = None
        self._map: mmap.mmap | None = None
        self._fd: int | None = None  # the ring file (the receiver unlinks it once mapped: slots grow through it)
        self._allocated: set[int] = set()  # the slots that hold their memory
        self._broken = False

    def _ensure(self, nbytes: int, slot: int) -> bool:
        """A ring whose slots hold ``nbytes``, with ``slot``'s memory allocated: a slot takes its memory when first
        written (``posix_fallocate``: ENOSPC now, not SIGBUS on a later write), so that a worker's first batch does
        not wait for the whole ring to be zeroed."""
        if nbytes > self._slot_bytes and not self._grow(max(nbytes, 2 * self._slot_bytes)):
            return False
        if slot in self._allocated:
            return True
        assert self._fd is not None
        try:
            os.posix_fallocate(self._fd, slot * self._slot_bytes, self._slot_bytes)
        except OSError:
            self._broken = True  # /dev/shm is full: batches travel the ordinary way
            return False
        self._allocated.add(slot)
        return True

    def _grow(self, size: int) -> bool:
        """A new ring file of slots of ``size`` bytes, none allocated yet."""
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._files += 1
        path = f"{self.prefix}{self._files}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        Finalize(None, _unlink_quietly, args=(path,), exitpriority=0)  # runs when the worker exits normally
        assert self.transport.slots is not None  # (sized by its mapper: torch_drt.nodes._mapper_pool.sized_transport)
        try:
            os.ftruncate(fd, size * self.transport.slots)
            self._map = mmap.mmap(fd, size * self.transport.slots)
        except OSError:
            os.close(fd)
            _unlink_quietly(path)
            self._broken = True
            return False
        self._fd, self._path, self._slot_bytes, self._allocated = fd, path, size, set()
        return True

    def _large(self, obj: Any, out: list[torch.Tensor]) -> None:
        if _is_leaf_sequence(obj):
            return
        if isinstance(obj, torch.Tensor):
            if (
                obj.device.type == "cpu"
                and not obj.is_sparse
                and obj.numel() * obj.element_size() >= self.transport.min_bytes
            ):
                out.append(obj)
        elif isinstance(obj, list | tuple):
            for x in obj:
                self._large(x, out)
        elif isinstance(obj, dict):
            for x in obj.values():
                self._large(x, out)

    def pack(self, batch: Any, slot: int | None) -> tuple[Any, bool]:
        """``(batch, packed)``: the batch with its large tensors replaced by ``SharedTensor`` descriptors."""
        if slot is None or self._broken or _SHM_DIR is None:
            return batch, False
        tensors: list[torch.Tensor] = []
        self._large(batch, tensors)
        if not tensors or not self._ensure(sum(_aligned(t.numel() * t.element_size()) for t in tensors), slot):
            return batch, False
        assert self._map is not None and self._path is not None
        offset = slot * self._slot_bytes
        placed: dict[int, SharedTensor] = {}
        for t in tensors:
            target = torch.frombuffer(self._map, dtype=t.dtype, count=t.numel(), offset=offset).view(t.shape)
            target.copy_(t)
            placed[id(t)] = SharedTensor(self._path, offset, tuple(t.shape), t.dtype)
            offset += _aligned(t.numel() * t.element_size())
        return _replace(batch, lambda x: placed.get(id(x), x) if isinstance(x, torch.Tensor) else x), True


_SCALARS = (int, float, str, bytes, bool)


def _is_leaf_sequence(obj: Any) -> bool:
    """A list or tuple that starts and ends with a scalar (indices, labels) is not searched for tensors: it travels
    as it is, at the cost of two looks however long it is.

    ``None`` is not such a scalar: it stands in for what a structure lacks (a pool's ``(None, batch)`` when a batch
    is not timed), and the rest of the structure is searched; so is a ``(label, tensor)`` pair."""
    if not isinstance(obj, list | tuple) or not obj:
        return False
    return isinstance(obj[0], _SCALARS) and isinstance(obj[-1], _SCALARS)


def _replace(obj: Any, leaf: Any) -> Any:
    """``obj`` with ``leaf`` applied to every leaf of its lists, tuples (named too) and dicts."""
    if _is_leaf_sequence(obj):
        return obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_replace(x, leaf) for x in obj))
    if isinstance(obj, list | tuple):
        return type(obj)(_replace(x, leaf) for x in obj)
    if isinstance(obj, dict):
        return type(obj)((k, _replace(v, leaf)) for k, v in obj.items())
    return leaf(obj)


class RingReader:
    """The receiving side: ``unpack(batch, packed, release)`` turns descriptors back into tensors.

    Without pinning a tensor is a view of its slot (no copy): the slot is released (``release()``) when the last
    tensor of the batch, and every view of it, is freed, so a training loop that drops each batch hands its slot
    back at once, while batches that are kept keep theirs (later batches then travel the ordinary way). With
    ``pin`` the tensors are copied into pinned memory and the slot is released at once.
    """

    def __init__(self, pin: bool = False) -> None:
        self.pin = pin
        self._maps: dict[str, mmap.mmap] = {}

    def _mapping(self, path: str) -> mmap.mmap:
        m = self._maps.get(path)
        if m is None:
            prefix = path.rsplit("_", 1)[0]
            for old in [p for p in self._maps if p.rsplit("_", 1)[0] == prefix]:
                del self._maps[old]  # the worker grew its ring; tensors still viewing the old one keep it mapped
            fd = os.open(path, os.O_RDWR)
            try:
                m = mmap.mmap(fd, 0)
            finally:
                os.close(fd)
            _unlink_quietly(path)  # the worker keeps its mapping; nothing is left behind in /dev/shm
            self._maps[path] = m
        return m

    def _view(self, d: SharedTensor, lease: _Lease) -> torch.Tensor:
        dtype = _NUMPY.get(d.dtype)
        if self.pin or dtype is None:
            out = torch.empty(d.shape, dtype=d.dtype, pin_memory=self.pin)
            nbytes = out.numel() * out.element_size()
            if nbytes:
                src = memoryview(self._mapping(d.path))[d.offset : d.offset + nbytes]
                out.view(-1).view(torch.uint8).numpy()[:] = src
            return out
        array = np.ndarray(d.shape, dtype=dtype, buffer=self._mapping(d.path), offset=d.offset)
        lease.hold(array)  # the tensor's storage keeps the array alive: its death frees the slot
        return torch.from_numpy(array)

    def unpack(self, batch: Any, packed: bool, release: Callable[[], None]) -> Any:
        """The batch with descriptors replaced by tensors (pinned when asked) and other tensors pinned."""
        if not packed:
            release()
            return _replace(batch, _pinned) if self.pin else batch
        lease = _Lease(release)
        try:
            return _replace(
                batch, lambda x: self._view(x, lease) if isinstance(x, SharedTensor) else _pinned(x) if self.pin else x
            )
        finally:
            lease.seal()

    def close(self) -> None:
        """Forget every ring (tensors still viewing one keep it mapped until they are freed)."""
        self._maps.clear()


def _pinned(x: Any) -> Any:
    return x.pin_memory() if isinstance(x, torch.Tensor) and x.device.type == "cpu" else x


class _Lease:
    """A slot lent to the arrays of one batch: released once it is sealed and every array is gone."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release, self._count, self._sealed = release, 0, False

    def hold(self, array: np.ndarray) -> None:
        self._count += 1
        weakref.finalize(array, self._drop)

    def _drop(self) -> None:
        self._count -= 1
        if self._sealed and self._count == 0:
            self._release()

    def seal(self) -> None:
        self._sealed = True
        if self._count == 0:
            self._release()


_NUMPY = {
    torch.uint8: np.uint8,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.bool: np.bool_,
    torch.complex64: np.complex64,
    torch.complex128: np.complex128,
}
