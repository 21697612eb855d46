"""Which loader worker runs the current code: torch's ``WorkerInfo`` for thread and process workers.

Process workers are set up as torch's are: ``torch.utils.data.get_worker_info()`` returns the worker's
``WorkerInfo`` (id, num_workers, seed, the worker's copy of the dataset), and the process's global random number
generators (``random``, ``torch``, ``numpy``) are seeded with the worker's seed, torch's way, before
``worker_init_fn`` runs. So existing sharding code (an ``IterableDataset`` that splits its stream by
``get_worker_info()``) and code that draws from the global generators keep working.

Thread workers share one process, its dataset object and its global generators: torch's ``get_worker_info()``
is None there (a process-wide value). ``torch_drt.loader.get_worker_info()`` gives each worker thread its own
``WorkerInfo`` (``worker_method="thread"``) whose ``rng`` holds generators of its own (``random.Random``,
``torch.Generator``, ``numpy`` ``Generator``) seeded with the worker's seed. Draws from the global generators in
threads are not reproducible (threads interleave); draws from ``torch_drt.random.item_generator()`` are, under
any topology.

A worker's seed is ``base_seed + worker_id`` (torch's rule) with ``base_seed`` derived from the loader's seed and
the epoch the workers were started in: distinct per worker, reproducible from the loader's seed.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

from torch_drt.sampling import derive_key

WORKER_DOMAIN = 0x3057  # separates worker seeds from the shuffle and item keys of the same loader seed
_BASE_MASK = (1 << 62) - 1  # base_seed + worker_id stays a valid torch seed

_local = threading.local()


def get_worker_info() -> Any:
    """The current loader worker's ``torch.utils.data.WorkerInfo`` (thread or process worker), else None.

    In a process worker it is what ``torch.utils.data.get_worker_info()`` returns; in a thread worker, the
    thread's own (``worker_method="thread"``, per-thread generators in ``rng``). None in the loader's thread,
    where ``num_workers=0`` loads, cheap batches run inline, and an ``IterableDataset`` is iterated with thread
    workers.
    """
    info = getattr(_local, "info", None)
    if info is not None:
        return info
    from torch.utils.data import get_worker_info as torch_worker_info

    return torch_worker_info()


def base_seed(seed: int, epoch: int) -> int:
    """The base seed of workers started in ``epoch`` of a loader seeded with ``seed``."""
    return derive_key(WORKER_DOMAIN, seed, epoch) & _BASE_MASK


class WorkerStart:
    """What a loader worker runs once when it starts, as torch's workers do: set its ``WorkerInfo``, seed the
    global generators (processes) or its own (threads), then call ``worker_init_fn(worker_id)``.

    Args:
        num_workers: workers of the loader.
        seed: the workers' base seed (``base_seed(loader_seed, epoch)``).
        dataset: the dataset (pickled with the fetch stage, so a process worker's info holds its own copy).
        worker_init_fn: the user's ``worker_init_fn`` or None.
        method: ``"thread"`` or ``"process"``.
    """

    def __init__(
        self,
        num_workers: int,
        seed: int,
        dataset: Any,
        worker_init_fn: Callable[[int], None] | None,
        method: str,
    ) -> None:
        self.num_workers, self.seed, self.dataset = num_workers, seed, dataset
        self.worker_init_fn, self.method = worker_init_fn, method

    def __call__(self, worker_id: int) -> None:
        from torch.utils.data._utils import worker as torch_worker

        seed = self.seed + worker_id
        if self.method == "process":
            _seed_globals(self.seed, worker_id)
            torch_worker._worker_info = torch_worker.WorkerInfo(
                id=worker_id, num_workers=self.num_workers, seed=seed, dataset=self.dataset
            )
        else:
            _local.info = torch_worker.WorkerInfo(
                id=worker_id,
                num_workers=self.num_workers,
                seed=seed,
                dataset=self.dataset,
                rng=_thread_rng(self.seed, worker_id),
                worker_method="thread",
            )
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)


def _seed_globals(base: int, worker_id: int) -> None:
    """Seed ``random``, ``torch`` and ``numpy``'s global generators as torch's worker loop does."""
    import torch
    from torch.utils.data._utils.worker import _generate_state

    seed = base + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return
    np.random.seed(_generate_state(base, worker_id))


def _thread_rng(base: int, worker_id: int) -> Any:
    """A thread worker's own generators (torch's ``_RNG``), seeded as a process worker's globals would be."""
    import numpy as np
    import torch
    from torch.utils.data._utils.worker import _RNG, _generate_state

    seed = base + worker_id
    return _RNG(
        random_generator=random.Random(seed),
        torch_generator=torch.Generator().manual_seed(seed),
        numpy_generator=np.random.default_rng(_generate_state(base, worker_id)),
    )
