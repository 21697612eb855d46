"""torch_drt: fast, correct and resumable data loading for PyTorch."""

from torch_drt.cache import (
    CacheCorruptError,
    CachedBatch,
    CachedDataset,
    CachedSample,
    CacheInput,
    CacheSourcesDatasetError,
    CacheSourcesDatasetSuccess,
    CacheWriteError,
    CacheWriteSuccess,
    DatasetRuntime,
    ReaderConfig,
    ShardCompression,
    WriterConfig,
)
from torch_drt.loader import StatefulDataLoader

__version__ = "0.1.0"

__all__ = [
    "CacheCorruptError",
    "CacheInput",
    "CacheSourcesDatasetError",
    "CacheSourcesDatasetSuccess",
    "CacheWriteError",
    "CacheWriteSuccess",
    "CachedBatch",
    "CachedDataset",
    "CachedSample",
    "DatasetRuntime",
    "ReaderConfig",
    "ShardCompression",
    "StatefulDataLoader",
    "WriterConfig",
    "__version__",
]
