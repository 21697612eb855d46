"""dataset-rt 0.4's public names on torch_drt: ``import torch_drt.compat.dataset_rt as drt`` for ``import dataset_rt
as drt``.

Everything is torch_drt's own class except two thin subclasses whose datasets return their metadata as a polars
``DataFrame`` (dataset-rt's table type) by default (``get_metadata(backend="arrow")`` still gives pyarrow), whose
``shuffle=True`` keeps dataset-rt's meaning (draws by weight with replacement: ``sampling="weighted"``) and whose
``to_torch_dataloader`` keeps dataset-rt's defaults (shuffled with a random seed, verbose, spawned workers).
"""

from __future__ import annotations

from typing import ClassVar

from torch_drt.cache import CachedDataset as _CachedDataset
from torch_drt.cache import DatasetRuntime as _DatasetRuntime
from torch_drt.cache.config import ReaderConfig, ShardCompression, WriterConfig, WriterProfilerConfig
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


class DatasetRuntime(_DatasetRuntime):
    """``torch_drt.DatasetRuntime`` whose datasets are this module's ``CachedDataset``."""

    dataset_class: type[_CachedDataset] = CachedDataset
