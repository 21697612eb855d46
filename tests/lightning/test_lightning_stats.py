"""LoaderStatsCallback and log_stats (issue 28): the loader's statistics reach Lightning's loggers and logging."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("lightning")

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers.logger import Logger

from torch_drt import StatefulDataLoader
from torch_drt.lightning import LoaderStatsCallback
from torch_drt.loader.stats_log import log_stats, stats_dict


class Recording(Logger):
    """A Lightning logger that keeps what it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[tuple[int, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        self.logged.append((step, dict(metrics)))


class Model(pl.LightningModule):
    def __init__(self, loader) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.loader = loader

    def training_step(self, batch, batch_idx):
        return (self.weight * batch.float()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self):
        return self.loader


def test_the_callback_logs_the_statistics_every_n_steps(tmp_path, caplog):
    loader = StatefulDataLoader(list(range(48)), batch_size=4)
    recording = Recording()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=recording, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[LoaderStatsCallback(every_n_steps=4)])
    with caplog.at_level(logging.INFO, logger="torch_drt.stats"):
        trainer.fit(Model(loader))
    ours = [(step, m) for step, m in recording.logged if "loader/batches" in m]
    assert [step for step, _ in ours] == [4, 8, 12]
    assert [m["loader/batches"] for _, m in ours] == [4, 8, 12]
    assert all("loader/stage/collate/busy_s" in m and "loader/wait_share" in m for _, m in ours)
    assert "loader statistics" in caplog.text and "bound" in caplog.text  # the verdict at the epoch's end


def test_every_n_steps_is_checked():
    with pytest.raises(ValueError, match="every_n_steps"):
        LoaderStatsCallback(every_n_steps=0)


def test_log_stats_and_the_flat_dict(caplog):
    loader = StatefulDataLoader(list(range(8)), batch_size=2)
    list(loader)
    with caplog.at_level(logging.INFO, logger="torch_drt.stats"):
        stats = log_stats(loader)
    assert stats.verdict() in caplog.text
    flat = stats_dict(loader, prefix="train/")
    assert flat["train/batches"] == 4 and "train/stage/dataset/items" in flat
    with pytest.raises(TypeError, match="torch_drt loader or LoaderStats"):
        stats_dict(object())
