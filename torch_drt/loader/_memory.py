"""What the autotuner measures memory by: a batch's bytes, a process's private memory, and the default cap."""

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


def private_bytes(pid: int) -> int:
    """A process's private memory (``Private_Clean + Private_Dirty`` of ``/proc/<pid>/smaps_rollup``); 0 unknown."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) * 1024 for line in f if line.startswith(("Private_Clean", "Private_Dirty")))
    except (OSError, ValueError, IndexError):
        return 0
