"""The values that cross the cache API: inputs, samples and per-source outcomes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from torch_drt.cache.dataset import CachedDataset

__all__ = [
    "CacheInput",
    "CacheSource",
    "CacheSourcesDatasetError",
    "CacheSourcesDatasetSuccess",
    "CacheWriteError",
    "CacheWriteResult",
    "CacheWriteSuccess",
    "CachedSample",
    "MetadataValue",
    "make_samples",
]

MetadataValue = bool | int | float | str


class CacheInput(NamedTuple):
    """One sample to write: a bytes-like payload and its metadata.

    Attributes:
        data: the payload (bytes, bytearray or memoryview).
        metadata: str keys to bool, int, float or str values; every sample of a source has the same keys
            and kinds.
    """

    data: bytes | bytearray | memoryview
    metadata: Mapping[str, MetadataValue]


class CachedSample(NamedTuple):
    """One sample read back from a cache.

    Attributes:
        data: the payload as bytes.
        metadata: the stored metadata of the sample (extra columns of the active table included).
        cache_id: the id of the cache the sample lives in.
        sample_id: the sample's position in that cache.
    """

    data: bytes
    metadata: dict[str, MetadataValue]
    cache_id: int
    sample_id: int


def make_samples(
    data: Sequence[bytes], metadata: pa.Table, cache_ids: np.ndarray, sample_ids: np.ndarray
) -> list[CachedSample]:
    """Turn read rows into ``CachedSample``s: payloads plus the rows' metadata columns and identity.

    Args:
        data: the payloads, one per row.
        metadata: the rows' metadata columns (stored and extra), one row per payload.
        cache_ids: the rows' cache ids.
        sample_ids: the rows' sample ids.
    """
    names = metadata.column_names
    columns = [c.to_pylist() for c in metadata.columns]
    rows = [dict(zip(names, values)) for values in zip(*columns)] if columns else [{} for _ in data]
    return [
        CachedSample(d, row, cid, sid) for d, row, cid, sid in zip(data, rows, cache_ids.tolist(), sample_ids.tolist())
    ]


@runtime_checkable
class CacheSource(Protocol):
    """Anything with a ``name`` and an ``__iter__`` yielding ``CacheInput``."""

    name: str

    def __iter__(self) -> Iterator[CacheInput]: ...


@dataclass(frozen=True)
class CacheWriteSuccess:
    """The cache of ``source_name`` is complete at ``path`` (written now or reused): a ``Path``, or the cache's URL."""

    source_name: str
    path: Path | str


@dataclass(frozen=True)
class CacheWriteError:
    """The cache of ``source_name`` could not be written; nothing was published for it."""

    source_name: str
    message: str


CacheWriteResult = CacheWriteSuccess | CacheWriteError


@dataclass(frozen=True)
class CacheSourcesDatasetSuccess:
    """Every source has a complete cache, loaded as ``dataset``."""

    dataset: CachedDataset
    results: list[CacheWriteResult]


@dataclass(frozen=True)
class CacheSourcesDatasetError:
    """At least one source failed (see ``results``), or the caches could not be loaded together."""

    results: list[CacheWriteResult]
    message: str
