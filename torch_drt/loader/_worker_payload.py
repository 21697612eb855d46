"""What the loader's workers receive: the mapping function and each epoch's start (``WorkerStart``).

Forked process workers inherit both as they are (lambdas work, as with torch); spawned or forkserver ones unpickle
them, which the loader checks once when it is built, so a dataset, transform, collate function or worker
initializer that does not pickle is a ``TypeError`` there, not a failure in a worker. A node as the dataset stays in
the loader's process: the workers get no dataset with their start.
"""

from __future__ import annotations

import multiprocessing
import pickle
from typing import Any

from torchdata.nodes import BaseNode

from torch_drt.loader.worker_info import WorkerStart, base_seed


def forks(multiprocessing_context: Any) -> bool:
    """Whether process workers of this start method fork (they inherit the dataset and functions: nothing pickles)."""
    return multiprocessing.get_context(multiprocessing_context).get_start_method() == "fork"


def check_picklable(loader: Any, map_fn: Any) -> None:
    """Raise ``TypeError`` when ``loader``'s process workers would have to unpickle ``map_fn`` and its
    ``worker_init_fn`` and one of them does not pickle (nothing to check for threads, 0 workers or fork)."""
    if loader.worker_method != "process" or loader.num_workers <= 0 or forks(loader.multiprocessing_context):
        return
    try:
        pickle.dumps((map_fn, loader.worker_init_fn))
    except Exception as e:
        raise TypeError(
            f"worker_method='process' needs a picklable dataset, transform, collate_fn and worker_init_fn: {e}"
        ) from e


def worker_start(loader: Any, epoch: int) -> WorkerStart:
    """The start of ``loader``'s workers in ``epoch``: their number, the epoch's base seed, the dataset (none for a
    node), the user's ``worker_init_fn`` and the worker method."""
    dataset = None if isinstance(loader.dataset, BaseNode) else loader.dataset
    return WorkerStart(loader.num_workers, base_seed(loader.seed, epoch), dataset, loader.worker_init_fn,
                       loader.worker_method)
