"""``to_torch_dataloader``'s arguments checked and resolved as dataset-rt 0.4.8 does, before anything is built.

The checks run in dataset-rt's order with its messages: reserved ``dataloader_kwargs``, then each argument's type
and range, then what depends on the resolved worker count (``timeout``, ``persistent_workers=True`` and an int
``prefetch_factor`` need loading processes), then the picklability of the callables.
"""

from __future__ import annotations

import multiprocessing
import pickle
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from math import isfinite
from multiprocessing.context import BaseContext
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any, Literal

from torch_drt._cpu_budget import WorkerCounts, resolve_worker_counts
from torch_drt.loader.dataloader import check_workers
from torch_drt.sampling.budget import MAX_SAMPLES
from torch_drt.sampling.topology import rank_zeros

MAX_SAMPLE_BUDGET = min(sys.maxsize, MAX_SAMPLES)
Sampling = Literal["permutation", "weighted"]  # how a shuffled loader takes rows (``ReaderConfig.sampling``)
HONOURED_KWARGS = {"in_order": (True,), "snapshot_every_n_steps": None}  # torch keywords with a meaning here
_RESERVED = frozenset(
    {
        "dataset",
        "sampler",
        "batch_sampler",
        "shuffle",
        "seed",
        "samples_per_epoch",
        "worker_partition",
        "work_dir",
        "batch_size",
        "num_workers",
        "sample_transform_fn",
        "collate_fn",
        "drop_last",
        "pin_memory",
        "timeout",
        "native_num_workers",
        "multiprocessing_context",
        "worker_init_fn",
        "prefetch_factor",
        "persistent_workers",
        "verbose",
        "dataloader_kwargs",
    }
)


def check_dataloader_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """dataset-rt's reserved keys refused (its message), then torch keywords without a meaning here refused."""
    extra = dict(kwargs) if kwargs is not None else {}
    if conflicts := _RESERVED & extra.keys():
        raise ValueError(f"dataloader_kwargs contains reserved arguments: {', '.join(sorted(conflicts))}")
    if unknown := sorted(extra.keys() - HONOURED_KWARGS.keys()):
        raise ValueError(f"dataloader_kwargs {unknown} are not supported by torch_drt's cache loader")
    if "in_order" in extra and extra["in_order"] is not True:
        raise ValueError("in_order=False is not supported: batches are always delivered in order")
    return extra


def _count(value: Any, name: str, low: int, high: int) -> None:
    if not (value == "auto" if isinstance(value, str) else type(value) is int and low <= value <= high):
        raise ValueError(f"{name} must be 'auto' or an integer between {low} and {high}")


class _Sink:
    """Where the picklability probe writes: nothing is kept."""

    def write(self, data: bytes) -> int:
        return len(data)


def check_picklable(num_workers: int, **fns: Any) -> None:
    """With loading processes, each callable must pickle (``ForkingPickler``, as torch's start methods use)."""
    if num_workers == 0:
        return
    for name, fn in fns.items():
        if fn is None:
            continue
        try:
            ForkingPickler(_Sink(), pickle.HIGHEST_PROTOCOL).dump(fn)
        except Exception as e:
            raise TypeError(
                f"{name} must be picklable for multiprocess loading: define it at module level ({e})"
            ) from e


@dataclass(frozen=True)
class ResolvedWorkers:
    """Worker counts and the settings that follow from them."""

    counts: WorkerCounts
    persistent: bool
    prefetch_factor: int | None
    context: BaseContext | None


@dataclass(frozen=True)
class LoaderOptions:
    """The scalar arguments, validated on construction (``ValueError`` with dataset-rt's message).

    ``seed_given``: whether ``seed`` came from the caller (only then does it require ``shuffle=True``).
    ``shard_window``: torch_drt's locality-aware shuffle (``ReaderConfig.shard_window``), given as an argument.
    ``sampling``: torch_drt's ``"permutation"`` or ``"weighted"`` (``ReaderConfig.sampling``), given as an argument.
    """

    shuffle: bool
    seed: int | Literal["random"]
    seed_given: bool
    samples_per_epoch: int | None
    worker_partition: Literal["split", "replicate"] | None
    batch_size: int
    num_workers: int | Literal["auto"]
    native_num_workers: int | Literal["auto"]
    drop_last: bool
    pin_memory: bool
    persistent_workers: bool | Literal["auto"]
    timeout: float
    multiprocessing_context: str | BaseContext | None  # as given: None is refused where the style kept it
    prefetch_factor: int | Literal["auto"]
    verbose: bool
    work_dir: str | Path | None
    shard_window: int | Literal["auto"] | None = None
    sampling: Sampling | None = None

    def __post_init__(self) -> None:
        _count(self.num_workers, "num_workers", 0, (1 << 32) - 1)
        _count(self.native_num_workers, "native_num_workers", 1, sys.maxsize)
        for name in ("shuffle", "drop_last", "pin_memory", "verbose"):
            if type(getattr(self, name)) is not bool:
                raise ValueError(f"{name} must be a boolean")
        if type(self.batch_size) is not int or not 1 <= self.batch_size <= sys.maxsize:
            raise ValueError("batch_size must be a positive integer fitting sys.maxsize")
        spe = self.samples_per_epoch
        if spe is not None and (type(spe) is not int or not 1 <= spe <= MAX_SAMPLE_BUDGET):
            raise ValueError(f"samples_per_epoch must be a positive integer <= {MAX_SAMPLE_BUDGET} or None")
        if not isfinite(self.timeout) or self.timeout < 0:
            raise ValueError("timeout must be finite and nonnegative")
        _count(self.prefetch_factor, "prefetch_factor", 1, sys.maxsize)
        persistent = self.persistent_workers
        if not (persistent is True or persistent is False or (isinstance(persistent, str) and persistent == "auto")):
            raise ValueError("persistent_workers must be a boolean or 'auto'")
        self._check_seed()
        context = self.multiprocessing_context
        if not (
            isinstance(context, BaseContext)
            or (isinstance(context, str) and context in ("inherit", *multiprocessing.get_all_start_methods()))
        ):
            raise ValueError("multiprocessing_context must be 'inherit', an available start method, or BaseContext")
        if self.worker_partition not in (None, "split", "replicate"):
            raise ValueError("worker_partition must be 'split', 'replicate', or None")
        if self.work_dir is not None and not Path(self.work_dir).is_dir():
            raise ValueError(f"work_dir={str(self.work_dir)!r} must be an existing directory")
        window = self.shard_window  # torch_drt's own argument, checked after dataset-rt's
        if window is not None and window != "auto" and (type(window) is not int or window < 1):
            raise ValueError(f"shard_window={window!r} must be None, 'auto' or an int >= 1")
        if window is not None and not self.shuffle:
            raise ValueError("shard_window is a way of shuffling: it needs shuffle=True")
        sampling = self.sampling
        if sampling not in (None, "permutation", "weighted"):
            raise ValueError(f"sampling={sampling!r} must be 'permutation', 'weighted' or None")
        if sampling is not None and not self.shuffle:
            raise ValueError(f"sampling={sampling!r} is a way of shuffling: it needs shuffle=True")
        if sampling == "weighted" and window is not None:
            raise ValueError(
                f"shard_window={window} is an exact order (every row once per epoch): it cannot be "
                "sampling='weighted' (draws with replacement); drop one of them"
            )

    def _check_seed(self) -> None:
        if isinstance(self.seed, str) and self.seed == "random":
            return
        if type(self.seed) is not int:
            raise ValueError("seed must be 'random' or an unsigned 64-bit integer")
        if self.seed_given and not self.shuffle:
            raise ValueError("seed requires shuffle=True; use 'random' for sequential reading")
        if not 0 <= self.seed < 1 << 64:
            raise ValueError("seed must be 'random' or an unsigned 64-bit integer")

    def resolved_seed(self, topology: tuple[int, int]) -> int:
        """The seed: the one given, or for ``"random"`` one drawn that every rank agrees on (rank zero draws it
        and broadcasts it: ``rank_zeros``).

        Raises:
            RuntimeError: ``"random"`` where the ranks cannot be asked (no process group, or another one than
                ``topology``).
        """
        if not self.random_seed:
            return int(self.seed)
        seed = rank_zeros(secrets.randbits(63), topology)
        if seed is None:
            raise RuntimeError(f"seed='random' on rank {topology[0]} of {topology[1]} needs the ranks to agree on "
                               "it: initialise the default process group of these ranks first, or give every rank "
                               "seed=")
        return seed

    @property
    def random_seed(self) -> bool:
        """``seed="random"``: a seed is drawn when the loader is built (and adopted from a checkpoint)."""
        return isinstance(self.seed, str)

    def order(
        self, sampling: Sampling | None, window: int | Literal["auto"] | None, default: Sampling
    ) -> tuple[Sampling | None, int | Literal["auto"] | None]:
        """``(sampling, shard window)`` in force: None, None when sequential; else the arguments, then the
        ``ReaderConfig``'s (``sampling``, ``window``), then the dataset's ``default``. A shard window is a
        permutation; an explicit ``sampling="weighted"`` sets the ``ReaderConfig``'s window aside."""
        if not self.shuffle:
            return None, None
        if self.sampling == "weighted":
            return "weighted", None
        window = self.shard_window if self.shard_window is not None else window
        if window is not None:
            return "permutation", window
        return self.sampling or sampling or default, None

    @property
    def partition(self) -> Literal["split", "replicate"]:
        """The partition: ``"replicate"`` when shuffled, ``"split"`` when sequential, unless one was given."""
        return self.worker_partition or ("replicate" if self.shuffle else "split")

    def resolve_workers(self, world_size: int) -> ResolvedWorkers:
        """Worker counts (``"auto"`` from the CPUs), then the checks and settings that depend on them."""
        counts = resolve_worker_counts(self.num_workers, self.native_num_workers, world_size)
        check_workers(counts.processes)
        check_workers(counts.native_threads)
        processes = counts.processes
        if processes == 0 and self.timeout != 0:
            raise ValueError("timeout must be zero with num_workers=0")
        if self.persistent_workers == "auto":
            persistent = processes > 0
        elif self.persistent_workers and processes == 0:
            raise ValueError("persistent_workers=True requires num_workers > 0")
        else:
            persistent = bool(self.persistent_workers)
        if self.prefetch_factor == "auto":
            prefetch = 2 if processes > 0 else None
        elif processes == 0:
            raise ValueError("prefetch_factor requires num_workers > 0")
        else:
            prefetch = int(self.prefetch_factor)
        return ResolvedWorkers(counts, persistent, prefetch, self._context(processes))

    def _context(self, processes: int) -> BaseContext | None:
        context = self.multiprocessing_context
        if processes == 0:
            return None
        if isinstance(context, BaseContext):
            return context
        return multiprocessing.get_context(None if context == "inherit" else context)
