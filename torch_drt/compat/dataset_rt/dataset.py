"""dataset-rt's ``CachedDataset``: torch_drt's, plus what exists only to be dataset-rt 0.4.8's (polars tables by
default, its aliases, the torch iterable view, the ``dataset.json`` export and the manifest update, an Ok/Err
value) and its defaults (``shuffle=True`` draws by weight; the loader shuffles with a random seed, prints its
events, spawns its processes and gives each its own stream)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

from torch_drt.cache._format import MANIFEST_FILE
from torch_drt.cache.dataset import CachedDataset as _CachedDataset
from torch_drt.cache.dataset import MetadataBackend
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.layout import manifest_digest, read_manifest
from torch_drt.cache.loader._loader_style import PER_WORKER, LoaderStyle, register_style
from torch_drt.compat.dataset_rt.results import (
    AbsentManifestTarget,
    Err,
    ManifestUpdateEntry,
    ManifestUpdateError,
    ManifestUpdateReport,
    Ok,
    Result,
)
from torch_drt.compat.dataset_rt.torch_iterable import SizedTorchIterableDataset

# dataset-rt's loader: shuffled with a random seed whatever the ReaderConfig says, events printed on its logger,
# spawned processes, each with its own stream
register_style("dataset-rt", LoaderStyle(True, "random", True, "dataset_rt.loader", "spawn", PER_WORKER))


class CachedDataset(_CachedDataset):
    """``torch_drt.CachedDataset`` whose ``get_metadata()`` / ``samples_metadata()`` return polars by default, whose
    ``shuffle=True`` draws by weight with replacement (``sampling="weighted"``, dataset-rt's meaning) and whose
    ``to_torch_dataloader`` has dataset-rt's defaults (``shuffle=True``, ``seed="random"``, ``verbose=True`` on
    the ``dataset_rt.loader`` logger, ``multiprocessing_context="spawn"``, a stream per loading worker) and
    writes the ``dump_config`` export into each loader's ``work_dir`` subdirectory."""

    loader_defaults: ClassVar[str] = "dataset-rt"
    sampling_default: ClassVar[Literal["permutation", "weighted"]] = "weighted"

    def get_metadata(self, backend: MetadataBackend | None = None) -> Any:
        """The active table as a ``polars.DataFrame`` (dataset-rt's type), or ``backend``'s (see
        ``torch_drt.CachedDataset.get_metadata``)."""
        return super().get_metadata(backend or "polars")

    def samples_metadata(self, backend: MetadataBackend | None = None) -> Any:
        """dataset-rt's alias of ``get_metadata``."""
        return self.get_metadata(backend)

    def set_samples_metadata(self, metadata: Any) -> None:
        """dataset-rt's alias of ``update_metadata``."""
        self.update_metadata(metadata)

    @property
    def runtime_num_workers(self) -> int:
        """The worker count of the runtime this dataset reads with (saved by ``dump_config``)."""
        return self._runtime.num_workers

    def to_torch_iterable_dataset(self) -> SizedTorchIterableDataset:
        """This dataset as a sized torch ``IterableDataset``, for a torch ``DataLoader`` with ``num_workers=0``.

        It yields what iterating the dataset yields, and ``len()`` is the dataset's current epoch length. In a
        loading worker it raises ``RuntimeError``, as in dataset-rt: use ``to_torch_dataloader`` for workers.
        """
        from torch_drt.compat.dataset_rt.torch_iterable import CachedIterableDataset

        return CachedIterableDataset(self)

    def to_torch_dataloader(self, **kwargs: Any) -> Any:
        """``torch_drt.CachedDataset.to_torch_dataloader`` with dataset-rt's defaults; with ``work_dir``, each
        loader's subdirectory also holds the dataset's ``dump_config`` export (datasets of local caches only)."""
        loader = super().to_torch_dataloader(**kwargs)
        if loader.work_dir is not None and not self.reader.remote:  # dataset.json holds local paths only
            try:
                self.dump_config(loader.work_dir)
            except BaseException:
                shutil.rmtree(loader.work_dir, ignore_errors=True)
                raise
        return loader

    def dump_config(self, path: str | Path) -> Path:
        """Save the cache paths, reader settings, worker count, active table and epoch length into ``path``.

        ``path`` must be an existing directory without an export; returns the ``dataset.json`` written there
        (dataset-rt's file format: see ``torch_drt.compat.dataset_rt.export``). Reader progress is not saved.

        Raises:
            pydantic.ValidationError: when ``path`` is not an existing directory.
            ValueError: when a cache is read from a URL.
            FileExistsError: when it already holds an export.
        """
        from torch_drt.compat.dataset_rt.export import dump_config

        return dump_config(self, path)

    @classmethod
    def from_config(cls, path: str | Path) -> CachedDataset:
        """A fresh dataset (with its own runtime) from a ``dataset.json`` that ``dump_config`` wrote.

        The caches are loaded and checked as ``cached_dataset`` does, the saved table is validated as
        ``update_metadata`` does, then the epoch length is restored; reading starts at the beginning.

        Raises:
            pydantic.ValidationError: for a missing file or an invalid configuration.
            ValueError: for a table that does not fit the caches or ``row_count``.
        """
        from torch_drt.cache.runtime import DatasetRuntime
        from torch_drt.compat.dataset_rt.export import load_config

        config, table = load_config(path)
        runtime = DatasetRuntime(config.num_workers)
        runtime.dataset_class = cls
        dataset = cast(
            "CachedDataset", runtime.cached_dataset(list(config.cache_paths), reader_config=config.reader_config)
        )
        dataset.update_metadata(table)
        dataset.set_epoch_len(config.epoch_len)
        return dataset

    def update_manifests(self, version: int) -> Result[ManifestUpdateReport, ManifestUpdateError]:
        """dataset-rt's migration of its v2 manifests to v3; here every manifest already stores its cache id.

        Returns:
            ``Ok(ManifestUpdateReport)`` with one ``"unchanged"`` entry per cache for ``version == 3`` (nothing
            is written), else ``Err(ManifestUpdateError)``, as dataset-rt answers: for another version, or naming
            the first cache whose manifest is no longer the one the dataset was opened with (changed, removed,
            unreadable), with the entries of the caches before it.
        """
        if type(version) is not int or version != 3:
            reason = AbsentManifestTarget("unsupported migration request")
            return Err(ManifestUpdateError(reason, "unsupported manifest migration target; expected integer 3"))
        entries: list[ManifestUpdateEntry] = []
        for layout in self.layouts:
            path = (Path(layout.path) / MANIFEST_FILE).resolve()
            try:
                changed = layout.backend is not None and (
                    manifest_digest(read_manifest(layout.backend)) != layout.manifest_digest
                )
            except CacheCorruptError as e:  # removed, unreadable, not JSON
                return Err(ManifestUpdateError(path, e.reason, tuple(entries)))
            if changed:
                return Err(ManifestUpdateError(path, "manifest changed since dataset construction", tuple(entries)))
            entries.append(ManifestUpdateEntry(path, layout.cache_id, "unchanged"))
        return Ok(ManifestUpdateReport(tuple(entries)))
