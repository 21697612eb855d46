"""One thread per image: torch_drt's per-image work runs its torch ops on the calling thread only, no intra-op threads.

Why. torch splits an element-wise op, a copy or a resize over its OpenMP threads once it has more than 32768
elements (``at::parallel_for``'s grain): every op on a 224 x 224 RGB image. For one image that saves little, and
each parallel region wakes OpenMP's helper threads and waits for them at a barrier. Idle libgomp threads spin
before sleeping, long (``GOMP_SPINCOUNT``'s default) while the process has no more OpenMP threads than CPUs, briefly
once it has more. With one team (2 threads on 2 CPUs: ``num_workers=0``, or a lone worker thread), the spinning
helper and the waiting thread compete with whatever else runs (a training step, other processes) and each small op
waits for a descheduled thread: 5-13x slower on a busy 2-CPU machine. A worker thread in a process whose main thread
already ran a parallel op has a second team, so libgomp throttles its spinning: that is why one worker thread was
fast and ``num_workers=0`` was not (``GOMP_SPINCOUNT=1000`` makes both fast, confirming it).

How. OpenMP's thread count (the ``nthreads-var`` ICV) belongs to each thread's own data environment, and torch's
OpenMP backend reads it for every op (``at::get_num_threads()`` is ``omp_get_max_threads()``). ``single_thread()``
sets it to 1 for the calling thread and ``restore()`` sets it back to the exact previous value, around one transform
call: no other thread and no process-wide setting changes. ``torch.set_num_threads`` is not used: it also writes
process-wide state (torch's count for threads started later, the pthreadpool's size, oneDNN's cache), which the
user's training thread shares. With another parallel backend, or no OpenMP runtime found and verified, both are
no-ops.

Used around each call of a ``torch_drt.transforms`` transform, ``ImageCollator`` and the loader's default collate:
the loader's workers (or the calling thread, with ``num_workers=0``) are the parallelism, as in torch's DataLoader,
whose worker processes run ``torch.set_num_threads(1)``. This module imports only torch (the loader uses it).

The values do not change for element-wise ops and copies; a reduction over more than 32768 elements
(``ColorJitter``'s contrast mean) is summed as torch sums it on one thread, as in torch's DataLoader workers
(``torch.set_num_threads(1)``).
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import threading
from collections.abc import Callable

import torch

_RUNTIME = re.compile(r"lib(g|i|)omp[\w.-]*\.(so|dylib)")
_lock = threading.Lock()
_resolved = False
_set: Callable[[int], None] | None = None  # omp_set_num_threads of the OpenMP runtime torch uses, or None


def _candidates() -> list[str]:
    """Paths of the OpenMP runtimes mapped in this process (Linux), then those shipped in torch/lib (macOS)."""
    paths: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if _RUNTIME.search(os.path.basename(path)) and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    return paths + sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "*omp*")))


def _verified(path: str) -> Callable[[int], None] | None:
    """``omp_set_num_threads`` of the runtime at ``path``, already loaded (never loads one: two OpenMP runtimes in
    one process conflict), when setting it on this thread is what torch reads; else None."""
    noload = getattr(os, "RTLD_NOLOAD", None)
    if noload is None:
        return None
    try:
        fn = ctypes.CDLL(path, mode=noload | os.RTLD_LOCAL).omp_set_num_threads
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], None
    before = torch.get_num_threads()  # also torch's per-thread initialisation, which would overwrite the value
    fn(before + 1)
    seen = torch.get_num_threads()
    fn(before)
    ok = seen == before + 1 and torch.get_num_threads() == before
    return fn if ok else None


def _resolve() -> None:
    global _resolved, _set
    with _lock:
        if _resolved:
            return
        if "parallel backend: OpenMP" in torch.__config__.parallel_info():
            for path in _candidates():
                _set = _verified(path)
                if _set is not None:
                    break
        _resolved = True


def single_thread() -> int:
    """Run this thread's torch ops on this thread only until ``restore``; returns what ``restore`` needs (0: nothing
    was changed)."""
    if not _resolved:
        _resolve()
    if _set is None:
        return 0
    n = torch.get_num_threads()
    if n == 1:
        return 0
    _set(1)
    return n


def restore(previous: int) -> None:
    """Give this thread back the thread count ``single_thread`` found."""
    if previous:
        _set(previous)  # type: ignore[misc]
