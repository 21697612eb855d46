"""The part of ``CachedDataset`` that mirrors dataset-rt 0.4's API beyond reading: tables as pyarrow or polars,
its aliases, the torch iterable view and configuration export (the manifest update, an Ok/Err value, is
``torch_drt.compat.dataset_rt``'s)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

import pyarrow as pa

from torch_drt.cache.records import SizedTorchIterableDataset

if TYPE_CHECKING:
    from collections.abc import Iterator

    from torch_drt.cache.dataset import CachedDataset
    from torch_drt.cache.layout import CacheLayout
    from torch_drt.cache.records import CachedSample
    from torch_drt.cache.runtime import DatasetRuntime

__all__ = ["METADATA_BACKENDS", "DatasetInterop", "MetadataBackend", "as_backend"]

MetadataBackend = Literal["arrow", "polars"]
METADATA_BACKENDS = ("arrow", "polars")


def as_backend(table: pa.Table, backend: MetadataBackend) -> Any:
    """``table`` as a ``pyarrow.Table`` (``"arrow"``) or a ``polars.DataFrame`` sharing its buffers (``"polars"``).

    Raises:
        ValueError: for another backend.
        ImportError: for ``"polars"`` without polars installed (``pip install torch_drt[polars]``).
    """
    if backend == "arrow":
        return table
    if backend == "polars":
        import polars as pl

        return pl.from_arrow(table, rechunk=False)
    raise ValueError(f"{backend=} must be one of {METADATA_BACKENDS}")


class DatasetInterop:
    """dataset-rt's remaining ``CachedDataset`` methods, on top of its table, epoch length and runtime.

    Attributes:
        metadata_backend: what ``get_metadata()`` returns by default: ``"arrow"`` (a ``pyarrow.Table``) here,
            ``"polars"`` (a ``polars.DataFrame``, as dataset-rt returns) for ``torch_drt.compat.dataset_rt``.
        loader_defaults: what ``to_torch_dataloader`` does with ``shuffle``, ``seed`` and ``verbose`` left out:
            ``"torch_drt"`` (the ``ReaderConfig``'s shuffle and seed, quiet) here, ``"dataset-rt"`` (shuffled
            with a random seed whatever the ``ReaderConfig`` says, events printed) for
            ``torch_drt.compat.dataset_rt``. It also decides the loader's default ``multiprocessing_context``
            (the platform's default here, dataset-rt's ``"spawn"`` there) and its streams (one per rank, resumable
            under any ``num_workers``, here; one per loading worker, dataset-rt's, there).
        sampling_default: what ``shuffle=True`` means when neither ``ReaderConfig.sampling``, ``sampling`` nor
            ``shard_window`` says: ``"permutation"`` (every row once per epoch) here, ``"weighted"`` (draws by
            weight with replacement, dataset-rt's meaning) for ``torch_drt.compat.dataset_rt``.
    """

    metadata_backend: ClassVar[MetadataBackend] = "arrow"
    loader_defaults: ClassVar[Literal["torch_drt", "dataset-rt"]] = "torch_drt"
    sampling_default: ClassVar[Literal["permutation", "weighted"]] = "permutation"

    if TYPE_CHECKING:  # what CachedDataset provides
        _runtime: DatasetRuntime
        layouts: tuple[CacheLayout, ...]

        def get_metadata(self, backend: MetadataBackend | None = None) -> Any: ...

        def update_metadata(self, table: Any) -> None: ...

        def set_epoch_len(self, n: int) -> None: ...

        def __len__(self) -> int: ...

        def __iter__(self) -> Iterator[CachedSample]: ...

    @property
    def runtime_num_workers(self) -> int:
        """The worker count of the runtime this dataset reads with (saved by ``dump_config``)."""
        return self._runtime.num_workers

    def samples_metadata(self, backend: MetadataBackend | None = None) -> Any:
        """dataset-rt's alias of ``get_metadata``."""
        return self.get_metadata(backend)

    def set_samples_metadata(self, metadata: Any) -> None:
        """dataset-rt's alias of ``update_metadata``."""
        self.update_metadata(metadata)

    def to_torch_iterable_dataset(self) -> SizedTorchIterableDataset:
        """This dataset as a sized torch ``IterableDataset``, for a torch ``DataLoader`` with ``num_workers=0``.

        It yields what iterating the dataset yields, and ``len()`` is the dataset's current epoch length. In a
        loading worker it raises ``RuntimeError``, as in dataset-rt: use ``to_torch_dataloader`` for workers.
        """
        from torch_drt.cache.torch_iterable import CachedIterableDataset

        return CachedIterableDataset(cast("CachedDataset", self))

    def dump_config(self, path: str | Path) -> Path:
        """Save the cache paths, reader settings, worker count, active table and epoch length into ``path``.

        ``path`` must be an existing directory without an export; returns the ``dataset.json`` written there
        (dataset-rt's file format: see ``torch_drt.cache.export``). Reader progress is not saved.

        Raises:
            pydantic.ValidationError: when ``path`` is not an existing directory.
            FileExistsError: when it already holds an export.
        """
        from torch_drt.cache.export import dump_config

        return dump_config(cast("CachedDataset", self), path)

    @classmethod
    def from_config(cls, path: str | Path) -> CachedDataset:
        """A fresh dataset (with its own runtime) from a ``dataset.json`` that ``dump_config`` wrote.

        The caches are loaded and checked as ``cached_dataset`` does, the saved table is validated as
        ``update_metadata`` does, then the epoch length is restored; reading starts at the beginning.

        Raises:
            pydantic.ValidationError: for a missing file or an invalid configuration.
            ValueError: for a table that does not fit the caches or ``row_count``.
        """
        from torch_drt.cache.export import load_config
        from torch_drt.cache.runtime import DatasetRuntime

        config, table = load_config(path)
        runtime = DatasetRuntime(config.num_workers)
        runtime.dataset_class = cast("type[CachedDataset]", cls)
        dataset = runtime.cached_dataset(list(config.cache_paths), reader_config=config.reader_config)
        dataset.update_metadata(table)
        dataset.set_epoch_len(config.epoch_len)
        return dataset
