"""CacheDataModule: a LightningDataModule over sample caches whose train loader resumes mid-epoch exactly.

Lightning is an optional dependency (``pip install torch_drt[lightning]``); this module imports it on use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import torch_drt as drt
from torch_drt.describe import described
from torch_drt.locations.location import Location
from torch_drt.sources.template import redact

try:
    import lightning.pytorch as pl
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("torch_drt.lightning needs Lightning: pip install 'torch_drt[lightning]'") from e

from torch_drt.lightning_stats import LoaderStatsCallback

__all__ = ["CacheDataModule", "LoaderStatsCallback"]

_VAL_VALUES = ("val", "valid", "validation")


def _location(path: str | Path) -> str | Path:
    """A URL as it is; anything else (``file://`` URLs too) a local path."""
    return Location.parse(path).target


def _shown(location: str | Path) -> str:
    """A location as reprs show it: a URL without credentials or query."""
    return redact(location) if isinstance(location, str) else str(location)


class CacheDataModule(pl.LightningDataModule):
    """Train and validation loaders over caches, built with ``CachedDataset.to_torch_dataloader``.

    The train loader's state is saved in Lightning checkpoints (and by Fabric through ``state_dict()``), so
    ``trainer.fit(ckpt_path=...)`` after a mid-epoch checkpoint continues on exactly the batch an uninterrupted
    run would have seen next, also under DDP. Under DDP each rank reads its share (see the cache loader's
    budgets); build the module the same way on every rank.

    Args:
        paths: the training caches (one or more cache directories or URLs such as ``s3://bucket/caches/train``).
        batch_size: samples per batch on each rank.
        shuffle: read the training rows shuffled (True: every row once per epoch, in a new order each epoch; see
            ``sampling``) or sequentially.
        seed: the sampling seed.
        sampling: with ``shuffle``, ``"permutation"`` (the default: every row once per epoch; the rows' weights
            must be equal) or ``"weighted"`` (draws by weight with replacement: rows repeat, others are missed).
        shard_window: with ``shuffle``, the locality-aware permutation of ``W`` shards at a time instead of the
            plain one (for caches at URLs whose node cache is smaller than the dataset); not with ``"weighted"``.
        num_workers: loading processes of each loader (a checkpoint resumes under another number).
        sample_transform_fn: ``CachedSample -> item`` on the loading workers.
        collate_fn: ``list[item] -> batch``.
        val_paths: validation caches; or use ``split_column``.
        split_column: a metadata column that splits the training caches' rows: validation rows have the str
            value ``"val"``, ``"valid"`` or ``"validation"`` (or True in a bool column); the others train.
        samples_per_epoch: training samples per epoch over all ranks (default: the training row count).
        multiprocessing_context: start method of loading processes (None: the platform's default, as torch's).
        storage_options: fsspec options for caches at URLs (credentials, endpoint).
        remote_config: node cache, prefetch and read-mode settings for caches at URLs.
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        *,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        sampling: Literal["permutation", "weighted"] | None = None,
        shard_window: int | None = None,
        num_workers: int = 0,
        sample_transform_fn: Callable[[Any], Any] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        val_paths: Sequence[str | Path] | None = None,
        split_column: str | None = None,
        samples_per_epoch: int | None = None,
        multiprocessing_context: str | None = None,
        storage_options: dict[str, Any] | None = None,
        remote_config: drt.RemoteConfig | None = None,
    ) -> None:
        super().__init__()
        if val_paths is not None and split_column is not None:
            raise ValueError("give val_paths or split_column, not both")
        if not paths:
            raise ValueError("paths must name at least one cache")
        if sampling not in (None, "permutation", "weighted"):
            raise ValueError(f"sampling={sampling!r} must be 'permutation', 'weighted' or None")
        for name, value in (("sampling", sampling), ("shard_window", shard_window)):
            if value is not None and not shuffle:
                raise ValueError(f"{name}={value!r} is a way of shuffling: it needs shuffle=True")
        self.paths = [_location(p) for p in paths]
        self.val_paths = None if val_paths is None else [_location(p) for p in val_paths]
        self.storage_options, self.remote_config = storage_options, remote_config
        self.batch_size, self.shuffle, self.seed, self.sampling = batch_size, shuffle, seed, sampling
        self.shard_window = shard_window
        self.num_workers, self.samples_per_epoch = num_workers, samples_per_epoch
        self.sample_transform_fn, self.collate_fn = sample_transform_fn, collate_fn
        self.split_column, self.multiprocessing_context = split_column, multiprocessing_context
        self._runtime: drt.DatasetRuntime | None = None
        self._train: drt.CachedDataset | None = None
        self._val: drt.CachedDataset | None = None
        self._train_loader: Any = None
        self._pending_state: dict[str, Any] | None = None

    def __repr__(self) -> str:
        paths = [_shown(p) for p in self.paths]
        return described(
            self,
            paths if len(paths) <= 2 else f"{len(paths)} caches",
            val_paths=None if self.val_paths is None else [_shown(p) for p in self.val_paths],
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            seed=self.seed,
            sampling=self.sampling,
            shard_window=self.shard_window,
            num_workers=self.num_workers,
            samples_per_epoch=self.samples_per_epoch,
            sample_transform_fn=self.sample_transform_fn,
            collate_fn=self.collate_fn,
            split_column=self.split_column,
        )

    def _dataset(self, paths: list[Path | str], shuffle: bool) -> drt.CachedDataset:
        if self._runtime is None:
            self._runtime = drt.DatasetRuntime(num_workers=1)
        return self._runtime.cached_dataset(
            paths, reader_config=drt.ReaderConfig(seed=self.seed, shuffle=shuffle),
            storage_options=self.storage_options, remote_config=self.remote_config,
        )

    def _val_mask(self, table: pa.Table) -> np.ndarray:
        if self.split_column not in table.column_names:
            raise ValueError(f"split_column {self.split_column!r} is not a metadata column ({table.column_names})")
        column = table.column(self.split_column)
        if pa.types.is_boolean(column.type):
            return column.to_numpy(zero_copy_only=False)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            return pc.is_in(column, pa.array(_VAL_VALUES)).to_numpy(zero_copy_only=False)
        raise ValueError(f"split_column {self.split_column!r} must be a str or bool column, not {column.type}")

    def setup(self, stage: str | None = None) -> None:
        """Open the caches and split the rows (no I/O beyond the caches' metadata)."""
        if self._train is not None:
            return
        self._train = self._dataset(self.paths, self.shuffle)
        if self.val_paths is not None:
            self._val = self._dataset(self.val_paths, False)
        elif self.split_column is not None:
            table = self._train.get_metadata()
            mask = self._val_mask(table)
            if mask.all() or not mask.any():
                raise ValueError(f"split_column {self.split_column!r} leaves no training or no validation rows")
            self._val = self._dataset(self.paths, False)
            self._val.update_metadata(table.filter(pa.array(mask)))
            self._train.update_metadata(table.filter(pa.array(~mask)))

    def _loader(self, dataset: drt.CachedDataset, *, shuffle: bool, samples: int | None) -> Any:
        seeded = {"seed": self.seed, "sampling": self.sampling, "shard_window": self.shard_window} if shuffle else {}
        return dataset.to_torch_dataloader(
            sample_transform_fn=self.sample_transform_fn,
            collate_fn=self.collate_fn,
            batch_size=self.batch_size,
            samples_per_epoch=samples,
            num_workers=self.num_workers,
            shuffle=shuffle,
            multiprocessing_context=self.multiprocessing_context or "inherit",
            **seeded,
        )

    def train_dataloader(self) -> Any:
        """The training loader (one per module: its streams continue from epoch to epoch)."""
        self.setup("fit")
        assert self._train is not None  # setup opened it
        if self._train_loader is None:
            self._train_loader = self._loader(self._train, shuffle=self.shuffle, samples=self.samples_per_epoch)
            if self._pending_state is not None:
                self._train_loader.load_state_dict(self._pending_state)
                self._pending_state = None
        return self._train_loader

    def val_dataloader(self) -> Any:
        """A sequential pass over the validation rows, or ``[]`` without validation data."""
        self.setup("validate")
        if self._val is None:
            return []
        return self._loader(self._val, shuffle=False, samples=len(self._val))

    def state_dict(self) -> dict[str, Any]:
        """The train loader's state (what Lightning and Fabric checkpoints keep)."""
        if self._train_loader is not None:
            return {"train_loader": self._train_loader.state_dict()}
        return {"train_loader": self._pending_state} if self._pending_state is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the train loader's state (applied when the loader is, or was already, created)."""
        state = state_dict.get("train_loader")
        if state is None:
            return
        if self._train_loader is not None:
            self._train_loader.load_state_dict(state)
        else:
            self._pending_state = state
