"""dataset-rt's answers as values: the ``Ok`` / ``Err`` result types, the manifest update's report and
``from_cache_sources``' outcome (torch_drt's own ``DatasetRuntime`` raises instead)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Literal, NamedTuple, TypeVar

if TYPE_CHECKING:
    from torch_drt.cache.records import CacheWriteResult
    from torch_drt.compat.dataset_rt.dataset import CachedDataset


class CacheSourcesDatasetSuccess(NamedTuple):
    """Every written or reused cache, loaded as ``dataset`` (``results`` has each source's outcome)."""

    dataset: CachedDataset
    results: list[CacheWriteResult]


class CacheSourcesDatasetError(NamedTuple):
    """No source has a cache (see ``results``), or the caches could not be loaded together."""

    results: list[CacheWriteResult]
    message: str


CacheSourcesDatasetResult = CacheSourcesDatasetSuccess | CacheSourcesDatasetError


T = TypeVar("T")
E = TypeVar("E")


@dataclass(frozen=True)
class Ok(Generic[T]):
    """A successful outcome (dataset-rt's ``Ok``), narrowed with ``match``."""

    value: T


@dataclass(frozen=True)
class Err(Generic[E]):
    """An expected failure (dataset-rt's ``Err``), narrowed with ``match``."""

    error: E


Result = Ok[T] | Err[E]


@dataclass(frozen=True)
class ManifestUpdateEntry:
    """One cache's manifest after ``CachedDataset.update_manifests``."""

    path: Path
    cache_id: int
    status: Literal["updated", "unchanged", "durability_unknown"]


@dataclass(frozen=True)
class ManifestUpdateReport:
    """One entry per cache, in cache order."""

    entries: tuple[ManifestUpdateEntry, ...]


@dataclass(frozen=True)
class AbsentManifestTarget:
    """A refused request names no manifest: why."""

    reason: str


@dataclass(frozen=True)
class ManifestUpdateError:
    """A refused or failed manifest update, with the entries completed before it."""

    path: Path | AbsentManifestTarget
    message: str
    entries: tuple[ManifestUpdateEntry, ...] = ()
