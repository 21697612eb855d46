"""CacheDataModule with a real Lightning Trainer (CPU, also DDP with 2 processes) and with Fabric."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning")

import torch
from conftest import ListSource

import torch_drt as drt
from torch_drt.lightning import CacheDataModule

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning_datamodule.py"


def run_example(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(EXAMPLE), str(workdir), *args], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def test_trainer_resumes_mid_epoch_exactly(tmp_path):
    proc = run_example(tmp_path)
    expected = "rank 0: 17 batches before the checkpoint, 13 after; the resumed stream continues exactly: yes"
    assert expected in proc.stdout


def test_trainer_ddp_two_processes_resumes_exactly(tmp_path):
    for phase in ("full", "part", "resume"):
        run_example(tmp_path, "--devices", "2", "--phase", phase)
    proc = run_example(tmp_path, "--devices", "2", "--phase", "check")
    assert proc.stdout.count("continues exactly: yes") == 2


def sample_id(sample):
    return sample.sample_id


@pytest.fixture
def cache(tmp_path, runtime):
    (res,) = runtime.write_cache([ListSource("fab", 40)], tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    return res.path


def module(cache, **kw):
    return CacheDataModule([cache], batch_size=4, seed=1, sample_transform_fn=sample_id, collate_fn=torch.tensor, **kw)


def test_fabric_saves_and_restores_the_loader(tmp_path, cache):
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1)
    reference = fabric.setup_dataloaders(module(cache).train_dataloader())
    expected = [b.tolist() for b in reference]

    dm = module(cache)
    loader = fabric.setup_dataloaders(dm.train_dataloader())
    it = iter(loader)
    head = [next(it).tolist() for _ in range(4)]
    fabric.save(tmp_path / "state.ckpt", {"data": dm})

    restored = module(cache)
    fabric.load(tmp_path / "state.ckpt", {"data": restored})
    rest = [b.tolist() for b in fabric.setup_dataloaders(restored.train_dataloader())]
    assert head + rest == expected


def test_split_column_and_val_paths(tmp_path, cache, runtime):
    class Split(ListSource):
        def __iter__(self):
            for i, item in enumerate(super().__iter__()):
                yield drt.CacheInput(item.data, {**item.metadata, "split": "val" if i % 4 == 0 else "train"})

    (res,) = runtime.write_cache([Split("split", 40)], tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    dm = CacheDataModule([res.path], batch_size=5, shuffle=False, sample_transform_fn=sample_id,
                         collate_fn=torch.tensor, split_column="split")
    val = sorted(x for b in dm.val_dataloader() for x in b.tolist())
    train = sorted(x for b in dm.train_dataloader() for x in b.tolist())
    assert val == list(range(0, 40, 4)) and train == [i for i in range(40) if i % 4]
    other = CacheDataModule([res.path], batch_size=5, val_paths=[cache], sample_transform_fn=sample_id,
                            collate_fn=torch.tensor)
    assert sorted(x for b in other.val_dataloader() for x in b.tolist()) == list(range(40))
    assert CacheDataModule([cache], batch_size=2).val_dataloader() == []
    with pytest.raises(ValueError, match="not both"):
        CacheDataModule([cache], batch_size=2, val_paths=[cache], split_column="split")
    with pytest.raises(ValueError, match="is not a metadata column"):
        CacheDataModule([cache], batch_size=2, split_column="nope").setup()
