"""CacheDataModule(shuffle=True) is a permutation (issue 21 item 5): a Lightning epoch trains on every row once; its
loading processes start with torch's default start method."""

from __future__ import annotations

import multiprocessing

import pytest

pytest.importorskip("lightning")

import lightning.pytorch as pl
import torch
from conftest import ListSource

import torch_drt as drt
from torch_drt.lightning import CacheDataModule

N = 96


def sample_id(sample) -> int:
    return sample.sample_id


class Counting(pl.LightningModule):
    """Records the sample ids of every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[int] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.seen += batch.tolist()
        return (self.weight * batch.float()).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


@pytest.fixture
def cache(tmp_path, runtime):
    (res,) = runtime.write_cache([ListSource("lit", N)], tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    return res.path


def fit(dm: CacheDataModule, tmp_path) -> list[int]:
    model = Counting()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(model, datamodule=dm)
    return model.seen


def test_one_epoch_of_fit_trains_on_every_row_once(cache, tmp_path):
    dm = CacheDataModule([cache], batch_size=8, seed=1, sample_transform_fn=sample_id, collate_fn=torch.tensor)
    seen = fit(dm, tmp_path)
    assert sorted(seen) == list(range(N)) and seen != list(range(N))
    again = CacheDataModule([cache], batch_size=8, seed=1, sample_transform_fn=sample_id, collate_fn=torch.tensor)
    assert fit(again, tmp_path) == seen


def test_weighted_sampling_is_an_explicit_choice(cache):
    dm = CacheDataModule([cache], batch_size=8, seed=1, sampling="weighted", sample_transform_fn=sample_id,
                         collate_fn=torch.tensor)
    seen = [x for batch in dm.train_dataloader() for x in batch.tolist()]
    assert len(seen) == N and len(set(seen)) < N
    with pytest.raises(ValueError, match="needs shuffle=True"):
        CacheDataModule([cache], batch_size=8, shuffle=False, sampling="weighted")


def test_shard_window_is_the_locality_aware_permutation(cache):
    dm = CacheDataModule([cache], batch_size=8, seed=1, shard_window=2, sample_transform_fn=sample_id,
                         collate_fn=torch.tensor)
    loader = dm.train_dataloader()
    seen = [x for batch in loader for x in batch.tolist()]
    assert sorted(seen) == list(range(N)) and loader.shard_window == 2


def test_loading_processes_use_torchs_default_start_method(cache):
    dm = CacheDataModule([cache], batch_size=8, num_workers=1, sample_transform_fn=sample_id, collate_fn=torch.tensor)
    loader = dm.train_dataloader()
    assert loader.multiprocessing_context.get_start_method() == multiprocessing.get_context().get_start_method()
    assert sorted(x for batch in loader for x in batch.tolist()) == list(range(N))
