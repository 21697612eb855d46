"""The CPUs a process may use (affinity and visible cgroup limits) and dataset-rt 0.4.8's automatic worker counts.

``available_cpus`` takes one observation: ``os.cpu_count()``, bounded by the affinity mask and by every CPU quota
(cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``) and CPU set (``cpuset.cpus.effective``,
``cpuset.cpus``) of the process's cgroups, walked up to the root of each visible cgroup mount. Fractions are rounded
down, with a minimum of one CPU; limits that cannot be read or parsed warn and count as one CPU rather than the
host's.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path, PurePosixPath
from typing import Literal, NamedTuple

_MOUNT_ESCAPES = ((r"\040", " "), (r"\011", "\t"), (r"\012", "\n"), (r"\134", "\\"))


class WorkerCounts(NamedTuple):
    """Loading processes per rank and reader threads per consumer."""

    processes: int
    native_threads: int


def _kernel_path(text: str) -> PurePosixPath:
    path = PurePosixPath(text)
    if not path.is_absolute() or ".." in path.parts:
        raise ValueError(f"invalid cgroup path {text!r}")
    return path


def _read(path: Path) -> str | None:
    """A control file's text; None when it does not exist (no limit there)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None


def _cpuset_size(text: str) -> int | None:
    """CPUs in a canonical list such as ``0-3,8``; None for an empty list (no limit)."""
    if not text:
        return None
    count, previous = 0, -1
    for part in text.split(","):
        bounds = [int(b) for b in part.split("-")]
        if len(bounds) > 2 or bounds[0] <= previous or bounds[-1] < bounds[0]:
            raise ValueError(f"invalid cgroup CPU set {text!r}")
        count += bounds[-1] - bounds[0] + 1
        previous = bounds[-1]
    return count


def _v2_limits(directory: Path) -> Iterator[Fraction]:
    quota_period = _read(directory / "cpu.max")
    if quota_period is not None:
        quota, period = quota_period.split()
        if int(period) <= 0:
            raise ValueError(f"invalid cgroup CPU period {quota_period!r}")
        if quota != "max":
            if int(quota) <= 0:
                raise ValueError(f"invalid cgroup CPU quota {quota_period!r}")
            yield Fraction(int(quota), int(period))
    cpus = _read(directory / "cpuset.cpus.effective")
    if cpus is not None and (size := _cpuset_size(cpus)) is not None:
        yield Fraction(size)


def _v1_limits(directory: Path, controllers: frozenset[str]) -> Iterator[Fraction]:
    if "cpu" in controllers:
        quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
        if (quota is None) != (period is None):
            raise ValueError(f"incomplete cgroup CPU quota in {directory}")
        if quota is not None and period is not None:
            if int(period) <= 0 or int(quota) == 0 or int(quota) < -1:
                raise ValueError(f"invalid cgroup CPU quota {quota}/{period} in {directory}")
            if int(quota) > 0:
                yield Fraction(int(quota), int(period))
    cpus = _read(directory / "cpuset.cpus") if "cpuset" in controllers else None
    if cpus is not None and (size := _cpuset_size(cpus)) is not None:
        yield Fraction(size)


def _cpu_mounts(mountinfo: str) -> Iterator[tuple[PurePosixPath, Path, Literal[1, 2], frozenset[str]]]:
    """``(root, mount point, version, options)`` of the cgroup mounts that can limit CPUs."""
    for line in mountinfo.splitlines():
        before, after = line.split(" - ", 1)
        fstype, _source, options = after.split(maxsplit=2)
        if fstype not in ("cgroup", "cgroup2"):
            continue
        fields = before.split()
        root, point = fields[3], fields[4]
        for escaped, char in _MOUNT_ESCAPES:
            root, point = root.replace(escaped, char), point.replace(escaped, char)
        opts = frozenset(options.split(","))
        if fstype == "cgroup2" or opts & {"cpu", "cpuset"}:
            yield _kernel_path(root), Path(_kernel_path(point)), 2 if fstype == "cgroup2" else 1, opts


def cgroup_cpu_limits(proc: Path = Path("/proc/self")) -> Iterator[Fraction]:
    """Every CPU limit of the process's cgroups, from its own cgroup up to each mount's root."""
    memberships = []
    for line in (proc / "cgroup").read_text().splitlines():
        hierarchy, listed, cgroup = line.split(":", 2)
        int(hierarchy)
        memberships.append((frozenset(c for c in listed.split(",") if c), _kernel_path(cgroup)))
    for root, point, version, options in _cpu_mounts((proc / "mountinfo").read_text()):
        for controllers, path in memberships:
            if (version == 2 and controllers) or (version == 1 and not controllers & options):
                continue
            directory = point / path.relative_to(root if path.is_relative_to(root) else PurePosixPath("/"))
            while True:
                yield from _v2_limits(directory) if version == 2 else _v1_limits(directory, options)
                if directory == point:
                    break
                directory = directory.parent


def available_cpus() -> int:
    """Whole CPUs this process may use (see the module docstring); at least one."""
    limit = Fraction(os.cpu_count() or 1)
    try:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    except OSError as e:
        warnings.warn(f"Cannot determine CPU affinity; using one CPU: {e}", RuntimeWarning, stacklevel=2)
        return 1
    if affinity:
        limit = min(limit, Fraction(affinity))
    if sys.platform == "linux":
        try:
            for constraint in cgroup_cpu_limits():
                limit = min(limit, constraint)
        except (OSError, ValueError, IndexError) as e:
            warnings.warn(f"Cannot determine container CPU limits; using one CPU: {e}", RuntimeWarning, stacklevel=2)
            return 1
    return max(1, int(limit))


def local_ranks(world_size: int) -> int:
    """Ranks on this machine: ``LOCAL_WORLD_SIZE`` when distributed and set, else all of them.

    Raises:
        ValueError: when ``LOCAL_WORLD_SIZE`` is not in ``[1, world_size]``.
    """
    configured = os.environ.get("LOCAL_WORLD_SIZE") if world_size > 1 else None
    if configured is None:
        return world_size
    if not 1 <= (ranks := int(configured)) <= world_size:
        raise ValueError(f"LOCAL_WORLD_SIZE={configured} must be between one and the world size {world_size}")
    return ranks


def node_processes(per_rank: int, world_size: int) -> int:
    """Processes of this node that read a cache: ``per_rank`` loading processes (at least one: with none, the
    rank's own process reads) in each of its ``local_ranks``. The one count a node's shared budgets are divided by
    (the node cache's prefetch quarter, reader threads, a shard window's node-cache ceiling).

    Raises:
        ValueError: when ``per_rank`` is negative, or as ``local_ranks``.
    """
    if per_rank < 0:
        raise ValueError(f"{per_rank=} must be >= 0")
    return max(1, per_rank) * local_ranks(world_size)


def in_loading_process() -> bool:
    """Whether this process is a loader's loading process (a process worker: torch's ``get_worker_info()`` is
    set); False without importing torch when nothing imported its data module (a writer, a CLI command)."""
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


def reading_processes(world_size: int | None = None) -> int:
    """``node_processes`` of the loader this process reads for: a process worker's ``num_workers`` (torch's
    ``get_worker_info()``; thread workers share their process), else this process alone, in each local rank
    (``world_size``: given, else the process group's)."""
    from torch.utils.data import get_worker_info

    from torch_drt.sampling.topology import resolve_topology

    info = get_worker_info()
    return node_processes(0 if info is None else info.num_workers,
                          resolve_topology()[1] if world_size is None else world_size)


def resolve_worker_counts(
    num_workers: int | Literal["auto"], native_num_workers: int | Literal["auto"], world_size: int
) -> WorkerCounts:
    """dataset-rt's counts: ``"auto"`` processes are ``min(4, cpus // local ranks - 1)``; ``"auto"`` threads are
    ``max(1, min(4, cpus // (max(1, processes) * local ranks)))``; explicit ints are kept (no CPU detection)."""
    if not isinstance(num_workers, str) and not isinstance(native_num_workers, str):
        return WorkerCounts(num_workers, native_num_workers)
    cpus, ranks = available_cpus(), local_ranks(world_size)
    processes = min(4, max(0, cpus // ranks - 1)) if num_workers == "auto" else num_workers
    threads = native_num_workers
    if threads == "auto":
        threads = max(1, min(4, cpus // node_processes(processes, world_size)))
    return WorkerCounts(int(processes), int(threads))
