"""Errors raised by the sample cache."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from torch_drt.cache.records import CacheWriteError, CacheWriteResult, CacheWriteSuccess
from torch_drt.locations.errors import CacheCorruptError


class FormatError(CacheCorruptError):
    """A file of a dataset in another system's format (WebDataset, MDS, LitData, Parquet, Arrow) is damaged or is
    not what its index says (``torch_drt.formats``); ``path`` names the file, ``reason`` the field at fault."""


class UnsafeEncodingError(FormatError):
    """A column is encoded with pickle, which executes code when read: refused unless ``allow_pickle=True``."""


class CacheSourcesError(RuntimeError):
    """Some sources have no cache after ``write_cache`` or ``from_cache_sources`` tried every one of them.

    Every source is tried (a failing source never stops the others) and nothing is published for a failed one;
    the caches that were written or reused stay where they are and are reused by the next ``from_cache_sources``.

    Attributes:
        results: each source's outcome, in input order: ``CacheWriteSuccess(source_name, path)`` or
            ``CacheWriteError(source_name, message)``.
    """

    def __init__(self, results: Iterable[CacheWriteResult]) -> None:
        self.results = list(results)
        failed = self.failures
        detail = "; ".join(f"{r.source_name}: {r.message}" for r in failed)
        super().__init__(f"{len(failed)} of {len(self.results)} sources have no cache ({detail})")

    @property
    def failures(self) -> list[CacheWriteError]:
        """The sources that failed, with what went wrong."""
        return [r for r in self.results if isinstance(r, CacheWriteError)]

    @property
    def paths(self) -> list[Path | str]:
        """The caches that were written or reused (``DatasetRuntime.cached_dataset`` loads them)."""
        return [r.path for r in self.results if isinstance(r, CacheWriteSuccess)]

    def __reduce__(self):  # keep the one-argument constructor across pickling
        return (type(self), (self.results,))
