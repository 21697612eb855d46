"""DatasetRuntime: one reusable worker pool that writes caches and loads them into datasets."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torch_drt.cache.backends import CacheBackend
from torch_drt.cache.cache_set import load_caches
from torch_drt.cache.config import ReaderConfig, WriterConfig
from torch_drt.cache.dataset import CachedDataset
from torch_drt.cache.errors import CacheCorruptError
from torch_drt.cache.records import (
    CacheSourcesDatasetError,
    CacheSourcesDatasetSuccess,
    CacheWriteError,
    CacheWriteResult,
    CacheWriteSuccess,
)
from torch_drt.cache.remote_config import RemoteConfig
from torch_drt.cache.remote_store import is_url
from torch_drt.cache.writer import WriteMode, write_source

__all__ = ["DatasetRuntime"]


def _root(root: str | Path) -> Path | str:
    """A URL stays a str (``file://`` becomes a path); anything else is a local path."""
    return str(root) if is_url(root) else Path(str(root).removeprefix("file://"))


def _as_list(sources: Any) -> list[Any]:
    if hasattr(sources, "name") and hasattr(sources, "__iter__"):
        return [sources]
    return list(sources)


class DatasetRuntime:
    """Owns one worker pool, reused by every write and by the datasets it loads.

    Args:
        num_workers: threads of the pool (sources written at once; reader threads of its datasets).
    """

    def __init__(self, num_workers: int = 2) -> None:
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"{num_workers=} must be an int >= 1")
        self.num_workers = num_workers
        self.pool = ThreadPoolExecutor(max_workers=num_workers, thread_name_prefix="torch_drt-runtime")

    def close(self) -> None:
        """Shut the pool down (datasets that still hold this runtime can no longer use it)."""
        self.pool.shutdown(wait=True)

    def __enter__(self) -> DatasetRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(
        self,
        sources: list[Any],
        root: Path | str,
        config: WriterConfig,
        mode: WriteMode,
        options: Mapping[str, Any] | None = None,
        remote: RemoteConfig | None = None,
    ) -> list[CacheWriteResult]:
        names = Counter(getattr(s, "name", None) for s in sources)
        results: list[CacheWriteResult | None] = [None] * len(sources)
        todo = []
        for i, source in enumerate(sources):
            name = getattr(source, "name", None)
            if names[name] > 1:
                results[i] = CacheWriteError(str(name), f"duplicate source name {name!r} in one call")
            else:
                todo.append(i)
        executor: Executor = self.pool
        owned = None
        if config.num_processes > 0:
            owned = executor = ProcessPoolExecutor(
                config.num_processes, mp_context=multiprocessing.get_context("spawn")
            )
        try:
            futures = {
                i: executor.submit(
                    write_source, sources[i], root, config, mode=mode, position=pos, storage_options=options,
                    remote_config=remote,
                )
                for pos, i in enumerate(todo)
            }
            for i, future in futures.items():
                try:
                    results[i] = future.result()
                except Exception as e:  # e.g. an unpicklable source with num_processes > 0
                    results[i] = CacheWriteError(str(getattr(sources[i], "name", i)), f"{type(e).__name__}: {e}")
        finally:
            if owned is not None:
                owned.shutdown(wait=True)
        return [r for r in results if r is not None]

    def write_cache(
        self,
        sources: Any,
        root: str | Path,
        *,
        writer_config: WriterConfig | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> list[CacheWriteResult]:
        """Write one cache per source under ``root/<source.name>``; existing caches are errors.

        Args:
            sources: one source or an iterable of sources (objects with ``name`` and ``__iter__``).
            root: the cache root directory, or a URL (``s3://bucket/caches``): each cache is then written to a
                local staging directory and uploaded, its manifest last (see ``docs/remote-caches.md``).
            writer_config: writer settings (defaults: ``WriterConfig()``).
            storage_options: fsspec options for a URL root (credentials, endpoint).
            remote_config: remote settings for a URL root.

        Returns:
            One ``CacheWriteSuccess`` / ``CacheWriteError`` per source, in input order. A failing source
            never stops the others.
        """
        return self._write(
            _as_list(sources), _root(root), writer_config or WriterConfig(), "create", storage_options, remote_config
        )

    def cached_dataset(
        self,
        paths: str | Path | Iterable[str | Path],
        *,
        reader_config: ReaderConfig,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> CachedDataset:
        """Load known caches into one dataset; a cache set's path stands for all its parts.

        Args:
            paths: one cache (a directory as a str or ``Path``, or a URL such as ``s3://bucket/caches/name``) or
                several. Local caches are memory-mapped; remote ones are read through the node cache (see
                ``RemoteConfig``), opening only their manifest, index and metadata.
            reader_config: the reader settings.
            storage_options: fsspec options for URLs (credentials, ``client_kwargs={"endpoint_url": ...}``).
            remote_config: node cache, prefetch and read-mode settings for URLs.

        Raises:
            FileNotFoundError: when a path does not exist.
            CacheCorruptError: naming the file of the first cache that fails validation.
            ValueError: when the caches do not share one schema or repeat a cache id.
        """
        paths = [paths] if isinstance(paths, str | Path | CacheBackend) else list(paths)
        loaded = [
            pair
            for p in paths
            for pair in load_caches(
                p, verify=reader_config.validate_cache, storage_options=storage_options, remote_config=remote_config
            )
        ]
        if not loaded:
            raise ValueError("cached_dataset needs at least one cache path")
        return CachedDataset(self, [lay for lay, _ in loaded], reader_config, tables=[t for _, t in loaded])

    def from_cache_sources(
        self,
        sources: Any,
        root: str | Path,
        *,
        reader_config: ReaderConfig,
        writer_config: WriterConfig | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> CacheSourcesDatasetSuccess | CacheSourcesDatasetError:
        """Reuse complete caches under ``root/<name>``, write the missing ones and load the successes.

        A directory there that is not a complete cache (a bare directory, or one a killed writer of another
        tool left) is moved aside, kept, and the cache is rebuilt. Two processes building the same cache at
        once end with one valid cache: the second to publish adopts the first's. ``root`` may be a URL (with
        ``storage_options`` and ``remote_config``): a cache without its manifest there is cleaned up and written.

        Returns:
            ``CacheSourcesDatasetSuccess(dataset, results)`` when at least one source has a cache (check
            ``results`` for the others), else ``CacheSourcesDatasetError(results, message)``.
        """
        results = self._write(
            _as_list(sources), _root(root), writer_config or WriterConfig(), "reuse", storage_options, remote_config
        )
        paths = [r.path for r in results if isinstance(r, CacheWriteSuccess)]
        failures = [r for r in results if isinstance(r, CacheWriteError)]
        if not paths:
            detail = "; ".join(f"{r.source_name}: {r.message}" for r in failures) or "no sources given"
            return CacheSourcesDatasetError(results, f"no cache could be written or reused ({detail})")
        try:
            dataset = self.cached_dataset(
                paths, reader_config=reader_config, storage_options=storage_options, remote_config=remote_config
            )
        except (CacheCorruptError, ValueError, OSError) as e:  # OSError: a cache removed since it was written
            return CacheSourcesDatasetError(results, f"caches could not be loaded together: {e}")
        return CacheSourcesDatasetSuccess(dataset, results)

    def __repr__(self) -> str:
        return f"DatasetRuntime(num_workers={self.num_workers})"
