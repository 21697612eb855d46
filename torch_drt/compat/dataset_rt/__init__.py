"""dataset-rt 0.4's public names on torch_drt: ``import torch_drt.compat.dataset_rt as drt`` for ``import dataset_rt
as drt``.

Everything is torch_drt's own class except what exists only to be dataset-rt 0.4.8, which lives here: a
``CachedDataset`` whose metadata is a polars ``DataFrame`` by default (``get_metadata(backend="arrow")`` still
gives pyarrow), whose ``shuffle=True`` keeps dataset-rt's meaning (draws by weight with replacement:
``sampling="weighted"``), whose ``to_torch_dataloader`` keeps dataset-rt's defaults (shuffled with a random seed,
verbose, spawned workers, the ``dataset.json`` export in ``work_dir``) and which has dataset-rt's aliases, its
torch iterable view, its export (``dump_config`` / ``from_config``) and its manifest update.

Failures come back as values here, exactly as dataset-rt answers: ``write_cache`` returns a ``CacheWriteSuccess`` /
``CacheWriteError`` per source, ``from_cache_sources`` a ``CacheSourcesDatasetSuccess`` / ``CacheSourcesDatasetError``
and ``update_manifests`` an ``Ok`` / ``Err``. torch_drt's own ``DatasetRuntime`` raises instead.
"""

from __future__ import annotations

from torch_drt.cache.config import ReaderConfig, ShardCompression, WriterConfig, WriterProfilerConfig
from torch_drt.cache.records import (
    CachedSample,
    CacheInput,
    CacheSource,
    CacheWriteError,
    CacheWriteResult,
    CacheWriteSuccess,
)
from torch_drt.compat.dataset_rt.dataset import CachedDataset
from torch_drt.compat.dataset_rt.results import (
    AbsentManifestTarget,
    CacheSourcesDatasetError,
    CacheSourcesDatasetResult,
    CacheSourcesDatasetSuccess,
    Err,
    ManifestUpdateEntry,
    ManifestUpdateError,
    ManifestUpdateReport,
    Ok,
    Result,
)
from torch_drt.compat.dataset_rt.runtime import DatasetRuntime
from torch_drt.compat.dataset_rt.torch_iterable import SizedTorchIterableDataset

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
