"""dataset-rt 0.4's public names on torch_drt: ``import torch_drt.compat.dataset_rt as drt`` for ``import dataset_rt
as drt``.

Everything is torch_drt's own class except two thin subclasses whose datasets return their metadata as a polars
``DataFrame`` (dataset-rt's table type) by default (``get_metadata(backend="arrow")`` still gives pyarrow), whose
``shuffle=True`` keeps dataset-rt's meaning (draws by weight with replacement: ``sampling="weighted"``) and whose
``to_torch_dataloader`` keeps dataset-rt's defaults (shuffled with a random seed, verbose, spawned workers).

Failures come back as values here, exactly as dataset-rt answers: ``write_cache`` returns a ``CacheWriteSuccess`` /
``CacheWriteError`` per source, ``from_cache_sources`` a ``CacheSourcesDatasetSuccess`` / ``CacheSourcesDatasetError``
and ``update_manifests`` an ``Ok`` / ``Err``. torch_drt's own ``DatasetRuntime`` raises instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from torch_drt.cache import CachedDataset as _CachedDataset
from torch_drt.cache import DatasetRuntime as _DatasetRuntime
from torch_drt.cache._format import MANIFEST_FILE
from torch_drt.cache.config import ReaderConfig, ShardCompression, WriterConfig, WriterProfilerConfig
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.layout import manifest_digest, read_manifest
from torch_drt.cache.records import (
    AbsentManifestTarget,
    CachedSample,
    CacheInput,
    CacheSource,
    CacheSourcesDatasetError,
    CacheSourcesDatasetResult,
    CacheSourcesDatasetSuccess,
    CacheWriteError,
    CacheWriteResult,
    CacheWriteSuccess,
    Err,
    ManifestUpdateEntry,
    ManifestUpdateError,
    ManifestUpdateReport,
    Ok,
    Result,
    SizedTorchIterableDataset,
)
from torch_drt.cache.runtime import _as_list, _root
from torch_drt.locations.remote_config import RemoteConfig

__all__ = [
    "AbsentManifestTarget",
    "CacheInput",
    "CacheSource",
    "CacheSourcesDatasetError",
    "CacheSourcesDatasetResult",
    "CacheSourcesDatasetSuccess",
    "CacheWriteError",
    "CacheWriteResult",
    "CacheWriteSuccess",
    "CachedDataset",
    "CachedSample",
    "DatasetRuntime",
    "Err",
    "ManifestUpdateEntry",
    "ManifestUpdateError",
    "ManifestUpdateReport",
    "Ok",
    "ReaderConfig",
    "Result",
    "ShardCompression",
    "SizedTorchIterableDataset",
    "WriterConfig",
    "WriterProfilerConfig",
]


class CachedDataset(_CachedDataset):
    """``torch_drt.CachedDataset`` whose ``get_metadata()`` / ``samples_metadata()`` return polars by default, whose
    ``shuffle=True`` draws by weight with replacement (``sampling="weighted"``, dataset-rt's meaning) and whose
    ``to_torch_dataloader`` has dataset-rt's defaults (``shuffle=True``, ``seed="random"``, ``verbose=True`` on
    the ``dataset_rt.loader`` logger, ``multiprocessing_context="spawn"``, a stream per loading worker)."""

    metadata_backend: ClassVar = "polars"
    loader_defaults: ClassVar = "dataset-rt"
    sampling_default: ClassVar = "weighted"

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


class DatasetRuntime(_DatasetRuntime):
    """``torch_drt.DatasetRuntime`` whose datasets are this module's ``CachedDataset`` and whose writes answer with
    values, as dataset-rt's do."""

    dataset_class: type[_CachedDataset] = CachedDataset

    def write_cache(  # type: ignore[override]  # dataset-rt's answer is a value per source, not an exception
        self,
        sources: Any,
        root: str | Path,
        *,
        writer_config: WriterConfig | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> list[CacheWriteResult]:
        """One ``CacheWriteSuccess`` / ``CacheWriteError`` per source, in input order (see
        ``torch_drt.DatasetRuntime.write_cache``, which raises instead).

        Raises:
            ValueError: when two sources have one name, before anything is written (as in dataset-rt).
        """
        config = writer_config or WriterConfig()
        return self._write(_as_list(sources), _root(root), config, "create", storage_options, remote_config)

    def from_cache_sources(  # type: ignore[override]  # dataset-rt's answer is a value, not an exception
        self,
        sources: Any,
        root: str | Path,
        *,
        reader_config: ReaderConfig,
        writer_config: WriterConfig | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> CacheSourcesDatasetResult:
        """Reuse or write every source's cache (see ``torch_drt.DatasetRuntime.from_cache_sources``) and answer
        as dataset-rt does.

        Returns:
            ``CacheSourcesDatasetSuccess(dataset, results)`` when at least one source has a cache (check
            ``results`` for the others), else ``CacheSourcesDatasetError(results, message)``.

        Raises:
            ValueError: when two sources have one name, before anything is written (as in dataset-rt).
        """
        reader_config.check_seed()
        config = writer_config or WriterConfig()
        results = self._write(_as_list(sources), _root(root), config, "reuse", storage_options, remote_config)
        paths = [r.path for r in results if isinstance(r, CacheWriteSuccess)]
        if not paths:
            failures = [r for r in results if isinstance(r, CacheWriteError)]
            detail = "; ".join(f"{r.source_name}: {r.message}" for r in failures) or "no sources given"
            return CacheSourcesDatasetError(results, f"no cache could be written or reused ({detail})")
        try:
            dataset = self.cached_dataset(
                paths, reader_config=reader_config, storage_options=storage_options, remote_config=remote_config
            )
        except (CacheCorruptError, ValueError, OSError) as e:  # OSError: a cache removed since it was written
            return CacheSourcesDatasetError(results, f"caches could not be loaded together: {e}")
        return CacheSourcesDatasetSuccess(dataset, results)
