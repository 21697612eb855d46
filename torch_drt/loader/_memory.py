"""What the autotuner measures memory by: a batch's bytes, a process worker's memory, and the default cap."""

from __future__ import annotations

import os
from typing import Any


def default_memory_cap() -> int:
    """Half of the memory available now (``MemAvailable``; without ``/proc``, half of the physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


def batch_bytes(batch: Any, depth: int = 0) -> int:
    """The bytes a batch holds: its tensors' and arrays' data, bytes and strings, through lists, tuples and dicts."""
    nbytes = getattr(batch, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(batch, bytes | bytearray | str):
        return len(batch)
    if depth > 8:
        return 0
    if isinstance(batch, dict):
        return sum(batch_bytes(value, depth + 1) for value in batch.values())
    if isinstance(batch, list | tuple):
        return sum(batch_bytes(value, depth + 1) for value in batch)
    return 0


def worker_bytes(pid: int) -> int:
    """The memory a forked process holds or may come to hold (``Anonymous + Private_Clean``; 0 unknown): its
    anonymous pages, those it still shares copy-on-write with its parent included, and the file pages only it maps.

    Its private memory alone is no bound: a page it shares with the parent becomes its own when either writes to it
    (the parent's allocations, frees and collections after the fork). The forked loading processes of a test on 2
    CPUs held 36 MB privately when measured, and 48 MB each when forked again later in the same run (over a cap
    their measure had fitted); their anonymous pages, 317-331 MB, varied by 4%. A parent with a large heap thus
    counts once per process: the cap is a bound that holds, not an estimate of the usual use.
    """
    return _rollup(pid, ("Anonymous", "Private_Clean"))


def _rollup(pid: int, fields: tuple[str, ...]) -> int:
    """The sum of ``fields`` (kB) of ``/proc/<pid>/smaps_rollup``, in bytes; 0 unknown."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) * 1024 for line in f if line.split(":")[0] in fields)
    except (OSError, ValueError, IndexError):
        return 0
