"""A Lightning run over a cache with CacheDataModule: checkpoint mid-epoch, resume, and check the stream.

    python examples/lightning_datamodule.py WORKDIR [--devices 2] [--phase all|full|part|resume]

Phases: ``full`` trains without interruption; ``part`` stops at a mid-epoch checkpoint; ``resume`` continues from
it. ``all`` runs the three in one process (single device) and checks that part + resume saw exactly the batches
of the full run. With ``--devices 2`` (DDP on CPU) run the phases one by one, then ``--phase check``.
Runs offline on generated data.
"""

from __future__ import annotations

import argparse
import json
import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

import torch_drt as drt

warnings.filterwarnings("ignore", ".*does not have many workers.*")
STEPS, STOP = 30, 17  # 96 samples: 12 (2 ranks) or 24 (1 rank) batches of 4 per epoch, so step 17 is mid-epoch


class Points:
    """y = 3x - 1 with noise; the payload is a pickled record, the metadata keeps the split and label."""

    name = "points_v1"

    def __iter__(self) -> Iterator[drt.CacheInput]:
        g = torch.Generator().manual_seed(0)
        for i in range(120):
            x = float(torch.rand((), generator=g))
            record = {"x": x, "y": 3 * x - 1 + 0.01 * float(torch.randn((), generator=g))}
            yield drt.CacheInput(pickle.dumps(record), {"split": "val" if i % 5 == 4 else "train"})


def decode(sample: drt.CachedSample) -> tuple[float, float, int]:
    record = pickle.loads(sample.data)
    return record["x"], record["y"], sample.sample_id


def collate(items: list[tuple[float, float, int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    xs, ys, ids = zip(*items)
    return torch.tensor(xs).unsqueeze(1), torch.tensor(ys).unsqueeze(1), torch.tensor(ids)


def build_cache(workdir: Path) -> Path:
    dataset = drt.DatasetRuntime(1).from_cache_sources(
        Points(),
        workdir / "cache",
        reader_config=drt.ReaderConfig(seed=0),
        writer_config=drt.WriterConfig(show_progress=False),
    )
    return Path(dataset.cache_paths[0])


def fit(workdir: Path, cache: Path, phase: str, devices: int) -> None:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint

    from torch_drt.lightning import CacheDataModule

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Linear(1, 1)
            self.seen: list[list[int]] = []

        def training_step(self, batch: tuple[torch.Tensor, ...], _: int) -> torch.Tensor:
            x, y, ids = batch
            self.seen.append(ids.tolist())
            loss = nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: tuple[torch.Tensor, ...], _: int) -> None:
            x, y, _ids = batch
            self.log("val_loss", nn.functional.mse_loss(self.net(x), y), sync_dist=True)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    datamodule = CacheDataModule(
        [cache],
        batch_size=4,
        shuffle=True,
        seed=3,
        sample_transform_fn=decode,
        collate_fn=collate,
        split_column="split",
    )
    callbacks: list[Callback] = [ModelCheckpoint(dirpath=workdir / "ckpt", every_n_train_steps=STOP, save_top_k=-1)]
    trainer = pl.Trainer(
        max_steps=STOP if phase == "part" else STEPS,
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks if phase == "part" else [],
        enable_checkpointing=phase == "part",
        default_root_dir=workdir,
        num_sanity_val_steps=0,
        val_check_interval=10,
    )
    model = Regression()
    ckpt = str(next((workdir / "ckpt").glob(f"*step={STOP}.ckpt"))) if phase == "resume" else None
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt)
    (workdir / f"{phase}_rank{trainer.global_rank}.json").write_text(json.dumps(model.seen))


def check(workdir: Path, devices: int) -> bool:
    ok = True
    for rank in range(devices):
        full, part, rest = (
            json.loads((workdir / f"{p}_rank{rank}.json").read_text()) for p in ("full", "part", "resume")
        )
        same = part + rest == full
        print(
            f"rank {rank}: {len(part)} batches before the checkpoint, {len(rest)} after; the resumed stream "
            f"continues exactly: {'yes' if same else 'NO'}"
        )
        ok &= same
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--phase", choices=["all", "full", "part", "resume", "check"], default="all")
    args = parser.parse_args()
    cache = build_cache(args.workdir)
    phases = ["full", "part", "resume"] if args.phase == "all" else [args.phase] if args.phase != "check" else []
    for phase in phases:
        fit(args.workdir, cache, phase, args.devices)
    if args.phase in ("all", "check") and not check(args.workdir, args.devices):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
