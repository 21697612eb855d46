"""dataset-rt's ``DatasetRuntime``: torch_drt's, whose datasets are dataset-rt's ``CachedDataset`` and whose
``write_cache`` / ``from_cache_sources`` answer with values (``CacheWriteSuccess`` / ``CacheWriteError`` per
source, ``CacheSourcesDatasetSuccess`` / ``CacheSourcesDatasetError``), as dataset-rt's do. torch_drt's own
``DatasetRuntime`` raises instead."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from torch_drt.cache.config import ReaderConfig, WriterConfig
from torch_drt.cache.dataset import CachedDataset as _CachedDataset
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.records import CacheWriteError, CacheWriteResult, CacheWriteSuccess
from torch_drt.cache.runtime import DatasetRuntime as _DatasetRuntime
from torch_drt.cache.runtime import _as_list, _root
from torch_drt.compat.dataset_rt.dataset import CachedDataset
from torch_drt.compat.dataset_rt.results import (
    CacheSourcesDatasetError,
    CacheSourcesDatasetResult,
    CacheSourcesDatasetSuccess,
)
from torch_drt.locations.remote_config import RemoteConfig


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
        target, options, remote = _root(root, storage_options, remote_config)
        return self._write(_as_list(sources), target, config, "create", options, remote)

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
        target, options, remote = _root(root, storage_options, remote_config)
        results = self._write(_as_list(sources), target, config, "reuse", options, remote)
        paths = [r.path for r in results if isinstance(r, CacheWriteSuccess)]
        if not paths:
            failures = [r for r in results if isinstance(r, CacheWriteError)]
            detail = "; ".join(f"{r.source_name}: {r.message}" for r in failures) or "no sources given"
            return CacheSourcesDatasetError(results, f"no cache could be written or reused ({detail})")
        try:
            dataset = cast("CachedDataset", self.cached_dataset(  # this runtime's dataset_class
                paths, reader_config=reader_config, storage_options=storage_options, remote_config=remote_config
            ))
        except (CacheCorruptError, ValueError, OSError) as e:  # OSError: a cache removed since it was written
            return CacheSourcesDatasetError(results, f"caches could not be loaded together: {e}")
        return CacheSourcesDatasetSuccess(dataset, results)
