"""LoaderStatsCallback: a Lightning callback logging the train loaders' statistics to the trainer's loggers.

Lightning is an optional dependency (``pip install torch_drt[lightning]``); this module imports it on use.
"""

from __future__ import annotations

import logging
from typing import Any

from torch_drt.loader.stats_log import log_stats, stats_dict

try:
    import lightning.pytorch as pl
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("torch_drt.lightning needs Lightning: pip install 'torch_drt[lightning]'") from e

__all__ = ["LoaderStatsCallback"]


def _loaders(obj: Any, name: str = "") -> list[tuple[str, Any]]:
    """The torch_drt loaders (anything with a ``stats()``) in Lightning's train dataloader(s), with their names."""
    if callable(getattr(obj, "stats", None)):
        return [(name, obj)]
    if isinstance(obj, dict):
        return [found for key, value in obj.items() for found in _loaders(value, f"{name}{key}/")]
    if isinstance(obj, list | tuple):
        return [found for i, value in enumerate(obj) for found in _loaders(value, f"{name}{i}/")]
    return []


class LoaderStatsCallback(pl.Callback):
    """Logs ``loader.stats().to_dict()`` of each torch_drt train loader every ``every_n_steps`` optimizer steps.

    Keys are ``{prefix}{loader name/}{key}`` (``"loader/wait_share"``, ``"loader/stage/dataset/busy_s"``; several
    loaders in a dict or list are named by their key or position), logged to every logger of the trainer on rank 0
    at the trainer's global step. With ``log_verdict`` the table and verdict also go to ``logging`` (logger
    ``torch_drt.stats``) at the end of each training epoch.

    Args:
        every_n_steps: how often to log, in optimizer steps.
        prefix: the keys' prefix.
        log_verdict: also log the table and verdict at each training epoch's end.
    """

    def __init__(self, every_n_steps: int = 50, prefix: str = "loader/", log_verdict: bool = True) -> None:
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(f"{every_n_steps=} must be an int >= 1")
        self.every_n_steps, self.prefix, self.log_verdict = every_n_steps, prefix, log_verdict
        self._last_step = -1

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(every_n_steps={self.every_n_steps}, prefix={self.prefix!r}, "
            f"log_verdict={self.log_verdict})"
        )

    def _metrics(self, trainer: pl.Trainer) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for name, loader in _loaders(trainer.train_dataloader):
            try:
                metrics |= stats_dict(loader, f"{self.prefix}{name}")
            except RuntimeError:  # a loader with statistics off
                continue
        return metrics

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = trainer.global_step
        if step == self._last_step or step % self.every_n_steps or not trainer.is_global_zero:
            return
        self._last_step = step
        metrics = self._metrics(trainer)
        if metrics:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.log_verdict or not trainer.is_global_zero:
            return
        for _, loader in _loaders(trainer.train_dataloader):
            try:
                log_stats(loader, logging.INFO)
            except RuntimeError:
                continue
