"""torch_drt: fast, correct and resumable data loading for PyTorch."""

import logging
from typing import TYPE_CHECKING

from torch_drt._lazy import lazy_names
from torch_drt.cache import (
    CacheCorruptError,
    CachedBatch,
    CachedDataset,
    CachedSample,
    CacheInput,
    CacheSource,
    CacheSourcesError,
    CacheWriteError,
    CacheWriteResult,
    CacheWriteSuccess,
    DatasetRuntime,
    ReaderConfig,
    RemoteConfig,
    ShardCompression,
    WriterConfig,
    WriterProfilerConfig,
    _registry,
)

__version__ = "0.1.0"

_registry.register("caches", "torch_drt.sets.cache_set:load_caches")  # a cache set's path opens as its parts
_registry.register("torch_dataloader", "torch_drt.cache.loader.torch_loader:to_torch_dataloader")  # the loader wing

logging.getLogger("torch_drt").addHandler(logging.NullHandler())  # silent unless the application configures logging

if TYPE_CHECKING:  # the lazily loaded names, visible to type checkers and IDEs
    from torch_drt.loader import StatefulDataLoader
    from torch_drt.sources import FileDataset, HttpDataset, ObjectStoreDataset
    from torch_drt.transforms import ImageCollator

# these import torch, aiohttp or fsspec: loaded on first use
_LAZY = {
    "FileDataset": "torch_drt.sources",
    "HttpDataset": "torch_drt.sources",
    "ImageCollator": "torch_drt.transforms",
    "ObjectStoreDataset": "torch_drt.sources",
    "StatefulDataLoader": "torch_drt.loader",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = [
    "CacheCorruptError",
    "CacheInput",
    "CacheSource",
    "CacheSourcesError",
    "CacheWriteError",
    "CacheWriteResult",
    "CacheWriteSuccess",
    "CachedBatch",
    "CachedDataset",
    "CachedSample",
    "DatasetRuntime",
    "FileDataset",
    "HttpDataset",
    "ImageCollator",
    "ObjectStoreDataset",
    "ReaderConfig",
    "RemoteConfig",
    "ShardCompression",
    "StatefulDataLoader",
    "WriterConfig",
    "WriterProfilerConfig",
    "__version__",
]
