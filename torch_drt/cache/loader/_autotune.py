"""``num_workers="tune"``: the cache loader's loading processes and batches ahead, searched by
``torch_drt.loader._autotune`` (the one autotuner ``torch_drt.StatefulDataLoader``'s ``num_workers="auto"`` runs).

The cache loader takes dataset-rt's arguments, where ``num_workers="auto"`` is the default and already means
dataset-rt's CPU budget (``min(4, cpus // local ranks - 1)`` processes: ``_cpu_budget``); the search is asked for
with ``"tune"`` instead, so ``"auto"`` keeps its meaning. It tunes torch_drt's own datasets' loaders, whose rank
reads one stream dealt to its loading processes in turn: the rows do not depend on their number, so it may change
mid-epoch. ``torch_drt.compat.dataset_rt``'s loaders give each process its own stream (dataset-rt's layout): there
the number fixes the rows, and ``"tune"`` is refused with dataset-rt's own message, as dataset-rt refuses it.
"""

from __future__ import annotations

from typing import Any

from torch_drt.loader._autotune_request import AutotuneRequest, check_memory_cap
from torch_drt.loader._tuner import Setting

TUNE = "tune"


def tune_request(num_workers: Any, prefetch_factor: Any, memory_cap: Any) -> AutotuneRequest | None:
    """The search ``num_workers="tune"`` asks for (None: nothing is tuned): processes and batches ahead, from one
    process and one batch ahead, under ``autotune_memory_cap``.

    Raises:
        ValueError: for a ``prefetch_factor`` given with ``"tune"``, or a bad ``autotune_memory_cap``.
    """
    tuning = isinstance(num_workers, str) and num_workers == TUNE
    check_memory_cap(memory_cap, tuning, "num_workers='tune'")
    if not tuning:
        return None
    if not (isinstance(prefetch_factor, str) and prefetch_factor == "auto"):
        raise ValueError(
            f"num_workers='tune' tunes the batches loaded ahead too: leave prefetch_factor='auto', not "
            f"{prefetch_factor!r}"
        )
    return AutotuneRequest(workers=True, depth=True, start=Setting(1, 1), memory_cap=memory_cap)
