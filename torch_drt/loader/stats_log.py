"""Loader statistics for everyone without Lightning: ``log_stats`` to ``logging``, ``stats_dict`` for TensorBoard.

    from torch.utils.tensorboard import SummaryWriter
    for name, value in stats_dict(loader).items():
        writer.add_scalar(name, value, step)
"""

from __future__ import annotations

import logging
from typing import Any

from torch_drt.loader.stats import LoaderStats

logger = logging.getLogger("torch_drt.stats")


def stats_of(source: Any) -> LoaderStats:
    """``source`` itself if it is a ``LoaderStats``, else ``source.stats()`` (a torch_drt loader).

    Raises:
        TypeError: when ``source`` is neither.
    """
    if isinstance(source, LoaderStats):
        return source
    stats = getattr(source, "stats", None)
    if not callable(stats):
        raise TypeError(f"expected a torch_drt loader or LoaderStats, got {type(source).__name__}")
    return stats()


def stats_dict(source: Any, prefix: str = "loader/") -> dict[str, float]:
    """``to_dict()`` of a loader's statistics, each key prefixed (``"loader/stage/dataset/busy_s"``)."""
    return {f"{prefix}{key}": value for key, value in stats_of(source).to_dict().items()}


def log_stats(source: Any, level: int = logging.INFO, log: logging.Logger | None = None) -> LoaderStats:
    """Log a loader's statistics table and verdict (logger ``torch_drt.stats`` unless ``log`` is given).

    Returns:
        The statistics logged.
    """
    stats = stats_of(source)
    (log or logger).log(level, "loader statistics:\n%s", stats)
    return stats
