"""RemoteStore: one URL prefix of an fsspec store, with the project's retries, time-outs and redacted errors.

Every request of the remote cache paths (reading, downloading, uploading, listing) goes through here, so that
each one is retried by ``torch_drt.sources.retry`` (the one retry policy; the store client's own retries are
turned off where this module knows how) and fails with an error that names the URL without credentials or query
strings. A URL that carries credentials, a query or a fragment is refused: pass credentials in
``storage_options``.
"""

from __future__ import annotations

import builtins
import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from torch_drt._inherited_clients import client_lock, made
from torch_drt.locations._chunked_download import download
from torch_drt.locations._client_options import client_options
from torch_drt.locations._store_errors import described_failure, s3_error_code
from torch_drt.locations._store_url import check_url
from torch_drt.locations.location import split_protocol
from torch_drt.locations.remote_config import RemoteConfig
from torch_drt.sources.retry import RetryPolicy

T = TypeVar("T")
_CONDITIONAL = frozenset({"s3", "s3a", "memory"})


class RemoteFileMissing(FileNotFoundError):
    """A file is missing at the store; ``rel`` is its path relative to the store's URL."""

    def __init__(self, rel: str, message: str) -> None:
        super().__init__(message)
        self.rel = rel


class RemoteStore:
    """A URL prefix (``s3://bucket/caches/name``) and the fsspec filesystem that reaches it.

    It pickles without its filesystem, which is made again on first use in each process.

    Args:
        url: the prefix; files are addressed relative to it (``"shards/000000.bin"``).
        storage_options: fsspec options (credentials, ``client_kwargs={"endpoint_url": ...}``); never shown.
        config: time-outs, retries and conditional writes.

    Raises:
        ValueError: for a URL with credentials, a query or a fragment, or no ``scheme://``.
    """

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, config: RemoteConfig | None = None):
        self.url = check_url(url)
        self.scheme = split_protocol(self.url)[0]
        self.options = dict(storage_options or {})
        self.config = config or RemoteConfig()
        self.policy = RetryPolicy(self.config.retries, self.config.backoff, self.config.max_backoff)
        self._client: tuple[int, Any, str] | None = None  # (pid, fsspec filesystem, root) of the process that made it

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def __repr__(self) -> str:
        return f"RemoteStore({self.url!r}, options={sorted(self.options)})"

    @property
    def fs(self) -> Any:
        """The fsspec filesystem (made on first use in this process: a forked child makes its own, once, however
        many of its threads ask at once)."""
        return self._made()[1]

    def _made(self) -> tuple[int, Any, str]:
        client = self._client
        if client is not None and client[0] == os.getpid():
            return client
        with client_lock():
            client = self._client
            if client is None or client[0] != os.getpid():
                client = self._client = (os.getpid(), *self._make())
        return client

    def _make(self) -> tuple[Any, str]:
        import fsspec

        try:
            fs, root = fsspec.core.url_to_fs(self.url, **client_options(self.scheme, self.options, self.config))
        except ImportError as e:
            raise ImportError(f"cannot open {self.url}: {e}") from None
        except Exception as e:
            error = ValueError(f"cannot open {self.url} with fsspec ({type(e).__name__}): check URL and options")
            raise error from None
        made(fs)  # a forked child keeps it alive, unused (see _inherited_clients)
        if self.scheme in ("s3", "s3a") and "retries" not in self.options:
            fs.retries = 1  # s3fs's own retry loop off: retry.py retries (an instance with our options)
        return fs, root

    @property
    def conditional(self) -> bool:
        """Whether the store refuses to overwrite on request (``RemoteConfig.conditional_writes``, else by scheme)."""
        chosen = self.config.conditional_writes
        return self.scheme in _CONDITIONAL if chosen is None else chosen

    def child(self, rel: str) -> RemoteStore:
        """The store of the prefix ``url/rel`` (same options and config)."""
        return RemoteStore(self.join(rel), self.options, self.config)

    def join(self, rel: str) -> str:
        """The URL of ``rel`` (for messages: it holds no secret)."""
        return f"{self.url}/{rel}" if rel else self.url

    def path(self, rel: str) -> str:
        """The filesystem path of ``rel``."""
        root = self._made()[2].rstrip("/")
        return f"{root}/{rel}" if rel else root

    def run(self, verb: str, rel: str, fn: Callable[[], T]) -> T:
        """``fn()`` under the retry policy; its failure names ``verb`` and the URL of ``rel``."""

        def attempt() -> T:
            try:
                return fn()
            except Exception as e:
                described = described_failure(e)
                if described is None:
                    raise
            raise described

        try:
            return self.policy.run(attempt, f"{verb} {self.join(rel)}", unknown=True)
        except FileNotFoundError as e:
            error = RemoteFileMissing(rel, str(e))
        raise error

    def read(self, rel: str, limit: int | None = None) -> bytes:
        """A whole file (at most ``limit + 1`` bytes are fetched, so a caller can tell it is too large).

        Raises:
            RemoteFileMissing: when it is missing; ``PermissionError``, ``TimeoutError`` or ``OSError`` otherwise.
        """
        path = self.path(rel)
        if limit is None:
            return self.run("reading", rel, lambda: bytes(self.fs.cat_file(path)))
        return self.run("reading", rel, lambda: self._cat(path, 0, limit + 1))

    def read_range(self, rel: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a file (fewer when the file is shorter: the caller checks)."""
        path = self.path(rel)
        return self.run("reading", rel, lambda: self._cat(path, start, end))

    def _cat(self, path: str, start: int, end: int) -> bytes:
        try:
            return bytes(self.fs.cat_file(path, start=start, end=end))
        except OSError as e:  # S3 refuses a range that starts at the end (of an empty object, say): no bytes there
            if s3_error_code(e) == "InvalidRange":
                return b""
            raise

    def read_ranges(self, rels: Sequence[str], starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        """Bytes ``[starts[i], ends[i])`` of ``rels[i]`` for each ``i``, up to ``ranges_in_flight`` requests at once;
        each failed request is retried on its own."""
        if not rels:
            return []
        paths = [self.path(r) for r in rels]
        extra = {"batch_size": self.config.ranges_in_flight} if getattr(self.fs, "async_impl", False) else {}
        try:
            got: list[Any] = self.fs.cat_ranges(paths, list(starts), list(ends), on_error="return", **extra)
        except Exception:  # the whole call failed (no connection, say): every range is retried below
            got = [None] * len(paths)
        return [
            bytes(d) if isinstance(d, bytes | bytearray) else self.read_range(r, s, e)
            for d, r, s, e in zip(got, rels, starts, ends)
        ]

    def read_at_once(self, rels: Sequence[str], limits: Sequence[int]) -> list[bytes | BaseException]:
        """Whole files, all requested at once (one round trip), each cut at ``limits[i] + 1`` bytes as ``read``
        cuts it; a request that failed gives its exception (nothing is retried: for reads that may be skipped)."""
        paths = [self.path(r) for r in rels]
        extra = {"batch_size": self.config.ranges_in_flight} if getattr(self.fs, "async_impl", False) else {}
        try:
            got: list[Any] = self.fs.cat_ranges(paths, [0] * len(paths), [n + 1 for n in limits], on_error="return",
                                                **extra)
        except Exception as e:  # the whole call failed (no connection, say)
            got = [e] * len(paths)
        return [bytes(d) if isinstance(d, bytes | bytearray) else d for d in got]

    def download(self, rel: str, fd: int, size: int) -> None:
        """Write the file's ``size`` bytes to ``fd`` (at their offsets) with ranged requests of ``chunk_bytes``.

        Raises:
            EOFError: when the file is shorter than ``size``.
        """
        download(self, rel, fd, size)

    def upload(self, local: str | os.PathLike, rel: str, *, create: bool = False) -> bool:
        """Copy a local file to ``rel`` (overwriting, unless ``create`` on a store with conditional writes); False
        when ``create`` found an object there (nothing was written)."""
        path = self.path(rel)

        def put() -> bool:
            if not (create and self.conditional):
                self.fs.put_file(os.fspath(local), path)
                return True
            try:
                self.fs.put_file(os.fspath(local), path, mode="create")
            except FileExistsError:
                return False
            return True

        return self.run("uploading", rel, put)

    def put(self, rel: str, data: bytes) -> None:
        """Write ``data`` to ``rel`` (overwriting)."""
        path = self.path(rel)
        self.run("writing", rel, lambda: self.fs.pipe_file(path, data))

    def put_new(self, rel: str, data: bytes) -> bool:
        """Write ``data`` to ``rel`` unless something is there; False when it was (checked atomically only on stores
        with conditional writes: see ``RemoteConfig.conditional_writes``)."""
        path = self.path(rel)

        def create() -> bool:
            try:
                if self.conditional:
                    self.fs.pipe_file(path, data, mode="create")
                    return True
                self.fs.cat_file(path, start=0, end=1)
                return False
            except FileExistsError:
                return False
            except FileNotFoundError:
                self.fs.pipe_file(path, data)
                return True

        return self.run("creating", rel, create)

    def read_or_none(self, rel: str, limit: int | None = None) -> bytes | None:
        """``read``, or None when the file is missing."""
        try:
            return self.read(rel, limit)
        except FileNotFoundError:
            return None

    def list(self) -> list[str]:
        """Every file under the prefix, relative to it (one listing; used by publishing and ``ls`` only)."""
        root = self.path("")

        def find() -> list[str]:
            self.fs.invalidate_cache()
            try:
                found = self.fs.find(root)
            except FileNotFoundError:
                return []
            return sorted(str(p)[len(root) :].lstrip("/") for p in found)

        return self.run("listing", "", find)

    def list_dirs(self) -> builtins.list[str]:  # the method list shadows the builtin in the class's annotations
        """The names directly under the prefix (for ``ls`` of a root of caches)."""
        root = self.path("")

        def ls() -> list[str]:
            self.fs.invalidate_cache()
            try:
                entries = self.fs.ls(root, detail=False)
            except FileNotFoundError:
                return []
            return sorted({str(p).rstrip("/").rsplit("/", 1)[-1] for p in entries})

        return self.run("listing", "", ls)

    def remove(self, rels: Sequence[str]) -> None:
        """Delete files (missing ones are fine)."""
        for rel in rels:
            path = self.path(rel)

            def rm(path: str = path) -> None:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(path)

            self.run("deleting", rel, rm)
