"""A 2-process DDP job on CPU whose LightningModule (or Fabric loop) uses torch_drt.StatefulDataLoader as is.

    python tests/loader/lightning_loader_job.py OUTDIR trainer|datamodule|fabric

``trainer`` builds the loader in ``train_dataloader()``; ``datamodule`` in a ``LightningDataModule.__init__``,
before the process group exists (Lightning then rebuilds it from its attributes, not from captured arguments).

Each rank writes ``OUTDIR/<mode>_rank<r>.json``: the sample ids it saw, per epoch. Lightning's defaults are kept
(``use_distributed_sampler=True``), which is what the test checks.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

from torch_drt import StatefulDataLoader

N, BATCH, EPOCHS = 50, 4, 2
warnings.filterwarnings("ignore", ".*does not have many workers.*")


def make_loader() -> StatefulDataLoader:
    return StatefulDataLoader(list(range(N)), batch_size=BATCH, shuffle=True, seed=3, num_workers=1)


def trainer_job(out: Path, early: bool = False) -> None:
    import lightning.pytorch as pl

    class Data(pl.LightningDataModule):
        def __init__(self) -> None:
            super().__init__()
            self.loader = make_loader()

        def train_dataloader(self):
            return self.loader

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(1, 1)
            self.seen: dict[int, list[int]] = {}

        def train_dataloader(self):
            return make_loader()

        def training_step(self, batch, _):
            self.seen.setdefault(self.current_epoch, []).extend(batch.tolist())
            return self.net(batch.float().unsqueeze(1)).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    trainer = pl.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    model = Model()
    trainer.fit(model, datamodule=Data() if early else None)
    name = "datamodule" if early else "trainer"
    (out / f"{name}_rank{trainer.global_rank}.json").write_text(json.dumps(model.seen))


def fabric_job(out: Path) -> None:
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    loader = fabric.setup_dataloaders(make_loader())
    seen = {epoch: [x for batch in loader for x in batch.tolist()] for epoch in range(EPOCHS)}
    (out / f"fabric_rank{fabric.global_rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    out_dir, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "fabric":
        fabric_job(out_dir)
    else:
        trainer_job(out_dir, early=mode == "datamodule")
