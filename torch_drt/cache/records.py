"""The values that cross the cache API: inputs, samples and per-source outcomes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

from torch_drt.describe import described

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


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

    def __repr__(self) -> str:  # the payload's size, not its bytes
        return described(self, data=self.data, metadata=self.metadata, cache_id=self.cache_id, sample_id=self.sample_id)


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
    return samples_of(data, metadata.column_names, [c.to_pylist() for c in metadata.columns], cache_ids, sample_ids)


def samples_of(
    data: Sequence[bytes],
    names: Sequence[str],
    columns: Sequence[list[MetadataValue]],
    cache_ids: np.ndarray,
    sample_ids: np.ndarray,
) -> list[CachedSample]:
    """``make_samples`` from the rows' metadata already as Python values: ``columns[j][i]`` is row ``i``'s value
    of ``names[j]``."""
    if len(columns) == 1:  # the common case: one dict display per row
        (name,), (column,) = names, columns
        rows = [{name: value} for value in column]
    elif columns:
        rows = list(map(dict, map(zip, repeat(names), zip(*columns))))
    else:
        rows = [{} for _ in data]
    # the named tuples are made in C (what CachedSample._make does, without a Python call per row)
    return list(map(tuple.__new__, repeat(CachedSample), zip(data, rows, cache_ids.tolist(), sample_ids.tolist())))


@dataclass(frozen=True)
class CachedBatch:
    """Samples read together: payloads plus their rows' identity and metadata columns.

    Attributes:
        data: the payloads, in order.
        cache_id: the rows' cache ids (uint64).
        sample_id: the rows' sample ids (int64).
        rows: the rows' positions in the active table (int64).
        metadata: the rows' stored and extra metadata columns as an Arrow table.
    """

    data: list[bytes]
    cache_id: np.ndarray
    sample_id: np.ndarray
    rows: np.ndarray
    metadata: pa.Table

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:  # sizes, not payloads
        nbytes = sum(len(d) for d in self.data)
        return f"CachedBatch({len(self.data)} samples, {nbytes} bytes, metadata={self.metadata.column_names})"

    def samples(self) -> list[CachedSample]:
        """The batch as ``CachedSample``s, in order."""
        return make_samples(self.data, self.metadata, self.cache_id, self.sample_id)


@runtime_checkable
class CacheSource(Protocol):
    """Anything with a ``name`` and an ``__iter__`` yielding ``CacheInput``."""

    name: str

    def __iter__(self) -> Iterator[CacheInput]: ...


class CacheWriteSuccess(NamedTuple):
    """The cache of ``source_name`` is complete at ``path`` (written now or reused): a ``Path``, or the cache's URL;
    a named tuple, as in dataset-rt."""

    source_name: str
    path: Path | str


class CacheWriteError(NamedTuple):
    """The cache of ``source_name`` could not be written; nothing was published for it (a named tuple).

    A record, not an exception: ``torch_drt.DatasetRuntime`` raises ``CacheSourcesError``, whose ``results`` hold
    these; ``torch_drt.compat.dataset_rt`` returns them, as dataset-rt does.
    """

    source_name: str
    message: str


CacheWriteResult = CacheWriteSuccess | CacheWriteError
