"""DatasetRuntime: one reusable worker pool that writes caches and loads them into datasets."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypedDict

from torch_drt.cache._process_writer import write_in_processes
from torch_drt.cache._profile import WriterProfile
from torch_drt.cache._registry import registered
from torch_drt.cache.config import ReaderConfig, WriterConfig
from torch_drt.cache.dataset import CachedDataset
from torch_drt.cache.errors import CacheSourcesError
from torch_drt.cache.records import CacheWriteError, CacheWriteResult, CacheWriteSuccess
from torch_drt.cache.writer import WriteMode, write_source
from torch_drt.locations import CacheBackend
from torch_drt.locations.location import Location
from torch_drt.locations.remote_config import RemoteConfig
from torch_drt.sources.template import redact


def _root(
    root: str | Path | Location, options: Mapping[str, Any] | None, config: RemoteConfig | None
) -> tuple[Path | str, Mapping[str, Any] | None, RemoteConfig | None]:
    """``(target, storage_options, remote_config)`` of a root: a URL stays a str (``file://`` becomes a path),
    anything else is a local path; a ``Location``'s own options and config fill those not given."""
    where = Location.parse(root, options, config)
    return where.target, where.storage_options, where.remote_config


def _as_list(sources: Any) -> list[Any]:
    if hasattr(sources, "name") and hasattr(sources, "__iter__"):
        return [sources]
    return list(sources)


def _require_backend(root: Path | str) -> None:
    """A URL root whose fsspec implementation is not installed (``s3://`` without s3fs) fails before any source."""
    if isinstance(root, Path):
        return
    import fsspec

    scheme = Location.parse(root).scheme
    try:
        fsspec.get_filesystem_class(scheme)
    except ImportError as e:
        raise ImportError(f"cannot write caches at {redact(root)}: {e}") from None
    except ValueError as e:  # an unknown protocol
        raise ValueError(f"cannot write caches at {redact(root)}: {e}") from None


def _successes(results: list[CacheWriteResult]) -> list[CacheWriteSuccess]:
    """Every result when all are successes; else ``CacheSourcesError`` carrying them all."""
    if any(isinstance(r, CacheWriteError) for r in results):
        raise CacheSourcesError(results)
    return [r for r in results if isinstance(r, CacheWriteSuccess)]


def _duplicate(sources: list[Any], fold: Callable[[str], str]) -> str | None:
    """The first source name, as it is spelt, whose ``fold`` an earlier source's name has."""
    seen: set[str] = set()
    for source in sources:
        if isinstance(name := getattr(source, "name", None), str):
            if fold(name) in seen:
                return name
            seen.add(fold(name))
    return None


def _refuse_duplicates(sources: list[Any], root: Path | str) -> None:
    if (name := _duplicate(sources, str)) is not None:
        path = root / name if isinstance(root, Path) else f"{redact(root)}/{name}"
        raise ValueError(f"duplicate generated cache path: {path} (two sources named {name!r})")


class _Where(TypedDict):
    """Where a write's caches go, beyond the root: the options of a URL root."""

    storage_options: Mapping[str, Any] | None
    remote_config: RemoteConfig | None


class DatasetRuntime:
    """Owns one worker pool, reused by every write and by the datasets it loads.

    Args:
        num_workers: threads of the pool (sources written at once; reader threads of its datasets).
    """

    dataset_class: type[CachedDataset] = CachedDataset  # what cached_dataset builds

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
        in_processes = config.num_processes > 0 and not config.profiler.enabled  # a profile is taken on threads,
        # as in dataset-rt, whose writer processes fail every source when two names differ at most in case
        if in_processes and (name := _duplicate(sources, str.casefold)) is not None:
            message = f"duplicate generated cache path: {name}"
            return [CacheWriteError(str(getattr(s, "name", None)), message) for s in sources]
        _refuse_duplicates(sources, root)
        profile = WriterProfile(config.profiler) if config.profiler.enabled else None
        where: _Where = {"storage_options": options, "remote_config": remote}
        try:
            if in_processes:
                return write_in_processes(sources, root, config, mode, **where)
            futures = [
                self.pool.submit(write_source, source, root, config, mode=mode, position=pos, profile=profile, **where)
                for pos, source in enumerate(sources)
            ]
            results: list[CacheWriteResult] = []
            for source, future in zip(sources, futures):
                try:
                    results.append(future.result())
                except Exception as e:
                    results.append(CacheWriteError(str(getattr(source, "name", None)), f"{type(e).__name__}: {e}"))
            return results
        finally:
            if profile is not None:
                profile.write()

    def write_cache(
        self,
        sources: Any,
        root: str | Path | Location,
        *,
        writer_config: WriterConfig | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> list[CacheWriteSuccess]:
        """Write one cache per source under ``root/<source.name>``; existing caches are errors.

        Args:
            sources: one source or an iterable of sources (objects with ``name`` and ``__iter__``).
            root: the cache root directory, or a URL (``s3://bucket/caches``): each cache is then written to a
                local staging directory and uploaded, its manifest last (see ``docs/remote-caches.md``); or a
                ``Location``, whose options and remote settings serve where ``storage_options`` and
                ``remote_config`` are not given.
            writer_config: writer settings (defaults: ``WriterConfig()``).
            storage_options: fsspec options for a URL root (credentials, endpoint).
            remote_config: remote settings for a URL root.

        Returns:
            One ``CacheWriteSuccess(source_name, path)`` per source, in input order.

        Raises:
            ValueError: when two sources have one name, before anything is written.
            ImportError: when the URL's fsspec implementation is missing (``pip install 'torch_drt[s3]'``),
                before anything is written.
            CacheSourcesError: when a source could not be written, after every source was tried (a failing
                source never stops the others); its ``results`` has each source's outcome. With
                ``writer_config.num_processes > 0``, two names equal but for case (``"Ab"``, ``"ab"``) fail every
                source, nothing written, as dataset-rt's writer processes do.
            KeyboardInterrupt, SystemExit: raised by a source (in a writer process too), as in dataset-rt.
        """
        root, storage_options, remote_config = _root(root, storage_options, remote_config)
        _require_backend(root)
        config = writer_config or WriterConfig()
        return _successes(self._write(_as_list(sources), root, config, "create", storage_options, remote_config))

    def cached_dataset(
        self,
        paths: str | Path | Location | Iterable[str | Path | Location],
        *,
        reader_config: ReaderConfig,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> CachedDataset:
        """Load known caches into one dataset; a cache set's path stands for all its parts.

        Args:
            paths: one cache (a directory as a str or ``Path``, a URL such as ``s3://bucket/caches/name``, or a
                ``Location`` carrying its options) or several. Local caches are memory-mapped; remote ones are read
                through the node cache (see ``RemoteConfig``), opening only their manifest, index and metadata.
            reader_config: the reader settings.
            storage_options: fsspec options for URLs (credentials, ``client_kwargs={"endpoint_url": ...}``).
            remote_config: node cache, prefetch and read-mode settings for URLs.

        Raises:
            FileNotFoundError: when a path does not exist.
            CacheCorruptError: naming the file of the first cache that fails validation.
            ValueError: when the caches do not share one schema or repeat a cache id.
            OverflowError: when ``reader_config.seed`` is outside ``[0, 2**64)``, as in dataset-rt.
        """
        reader_config.check_seed()
        paths = [paths] if isinstance(paths, str | Path | Location | CacheBackend) else list(paths)
        load_caches = registered("caches")  # a set's path stands for its parts (torch_drt.sets)
        loaded = [
            pair
            for p in paths
            for pair in load_caches(
                p, verify=reader_config.validate_cache, storage_options=storage_options, remote_config=remote_config
            )
        ]
        if not loaded:
            raise ValueError("cached_dataset needs at least one cache path")
        return self.dataset_class(self, [lay for lay, _ in loaded], reader_config, tables=[t for _, t in loaded])

    def from_cache_sources(
        self,
        sources: Any,
        root: str | Path | Location,
        *,
        reader_config: ReaderConfig,
        writer_config: WriterConfig | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: RemoteConfig | None = None,
    ) -> CachedDataset:
        """Reuse complete caches under ``root/<name>``, write the missing ones and load them all as one dataset.

        A directory there that is not a complete cache (a bare directory, or one a killed writer of another
        tool left) is moved aside, kept, and the cache is rebuilt. Two processes building the same cache at
        once end with one valid cache: the second to publish adopts the first's. ``root`` may be a URL (with
        ``storage_options`` and ``remote_config``): a cache without its manifest there is cleaned up and written.

        Returns:
            The ``CachedDataset`` of every source's cache, in input order.

        Raises:
            ValueError: when no source is given or two sources have one name (before anything is written), or
                when the caches do not share one schema.
            ImportError: when the URL's fsspec implementation is missing, before anything is written.
            CacheSourcesError: when a source has no cache, after every source was tried; its ``results`` has
                each source's outcome (the caches that were written stay, and are reused by the next call).
            CacheCorruptError: when a written or reused cache fails validation while loading.
            KeyboardInterrupt, SystemExit: raised by a source (in a writer process too), as in dataset-rt.
        """
        reader_config.check_seed()
        sources, (root, storage_options, remote_config) = _as_list(sources), _root(root, storage_options, remote_config)
        if not sources:
            raise ValueError("from_cache_sources needs at least one source")
        _require_backend(root)
        results = self._write(sources, root, writer_config or WriterConfig(), "reuse", storage_options, remote_config)
        paths = [r.path for r in _successes(results)]
        return self.cached_dataset(
            paths, reader_config=reader_config, storage_options=storage_options, remote_config=remote_config
        )

    def __repr__(self) -> str:
        return f"DatasetRuntime(num_workers={self.num_workers})"
