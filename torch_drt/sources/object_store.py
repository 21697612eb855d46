"""ObjectStoreDataset: item i is an object under the store and prefix of a URL, through fsspec."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from torch_drt._inherited_clients import made
from torch_drt._protocol import split_protocol
from torch_drt.sources._base import DEFAULT_MAX_BYTES, LocatedDataset, check_size
from torch_drt.sources._locations import Locations
from torch_drt.sources._timed import run_with_timeout
from torch_drt.sources._urls import redact
from torch_drt.sources.retry import is_transient


def _open_store(url: str, options: Mapping[str, Any]) -> tuple[Any, str]:
    """``fsspec.core.url_to_fs(url, **options)``, with errors that show neither the URL's secrets nor options; a
    forked child keeps the client alive, unused (``torch_drt._inherited_clients``)."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **options)
    except ImportError as e:  # fsspec's own message: which package a protocol needs
        error: Exception = ImportError(f"cannot open {redact(url)}: {e}")
    except Exception as e:
        error = ValueError(f"cannot open {redact(url)} with fsspec ({type(e).__name__}): check the URL and options")
    else:
        return made(fs), root
    raise error


class ObjectStoreDataset(LocatedDataset):
    """Objects of an fsspec store (s3://, gs://, az://, http(s)://, file://, memory://, ...).

    Credentials come from ``options`` (passed to the fsspec filesystem, e.g. ``key``/``secret``/
    ``client_kwargs`` for s3fs) and the usual environment variables (AWS_*, GOOGLE_*, AZURE_*). The filesystem is
    made when the dataset is (which checks the URL and options), and again on first use in each process the
    dataset is unpickled in, so it pickles for process workers.

    Args:
        url: the store and prefix, e.g. ``"s3://bucket/tiles"``.
        keys: one key (a str) per item, relative to the prefix; a single str is refused (``TypeError``).
        options: fsspec filesystem options (their names show in the repr, never their values).
        timeout: seconds per request (None: 30).
        retries: further attempts after a transient failure (``sources.retry.is_transient``: anything but
            not-found, permission and bad-input errors, since stores raise their own types for throttling and
            server errors).
        backoff: base wait in seconds.
        max_backoff: longest wait.
        max_bytes: largest accepted object (checked from its size before reading, and after).

    Raises (from ``ds[i]``): ``FileNotFoundError``/``PermissionError`` or ``OSError`` (with the attempt count),
    ``TimeoutError``, ``ValueError`` for an object over ``max_bytes``, ``TypeError`` for an index that is not an
    int, ``IndexError``. Messages name objects without credentials or query strings and chain no store error.
    Constructing raises ``ValueError`` (or ``ImportError``) when fsspec cannot open ``url`` with ``options``.
    """

    kind = "key"

    def __init__(
        self,
        url: str | os.PathLike,
        keys: Iterable[str] | Locations,
        *,
        options: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if not isinstance(url, str | os.PathLike):
            raise TypeError(f"url must be a str, got {type(url).__name__}")
        super().__init__(
            keys,
            timeout=30.0 if timeout is None else timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            max_bytes=max_bytes,
        )
        self.url, self.options = os.fspath(url), dict(options or {})
        self._fs, self._root = _open_store(self.url, self.options)  # validates the URL and options now
        self._fs_pid = os.getpid()
        self._protocol = split_protocol(self.url)[0] or "file"

    @classmethod
    def from_template(
        cls,
        url: str,
        template: str,
        columns: Mapping[str, Any] | None = None,
        *,
        length: int | None = None,
        **options: Any,
    ) -> ObjectStoreDataset:
        """Item i's key (under the prefix of ``url``) is ``template`` with item i's column values."""
        return cls(url, Locations.from_template(template, columns, "key", length), **options)

    def _repr_args(self) -> list[str]:
        return [repr(redact(self.url)), *super()._repr_args(), f"options={sorted(self.options)}"]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fs"] = None
        return state

    def _filesystem(self) -> Any:
        """The filesystem of this process: a forked worker opens its own (a client's connections and event loop
        belong to the process that made them, as fsspec's instance cache does)."""
        if self._fs is None or self._fs_pid != os.getpid():
            self._fs, self._root = _open_store(self.url, self.options)
            self._fs_pid = os.getpid()
        return self._fs

    def path(self, index: int) -> str:
        """The store path of item ``index``."""
        key = self.locations[index]
        return f"{self._root.rstrip('/')}/{key.lstrip('/')}" if self._root else key

    def _read(self, path: str) -> bytes:
        fs = self._filesystem()
        try:
            size = fs.size(path)
        except Exception as e:
            if not is_transient(e, unknown=True):
                raise
            size = None  # the read below fails the same way, or tells
        check_size(size, self.max_bytes, "the object")
        data = fs.cat_file(path)
        check_size(len(data), self.max_bytes, "the object (read)")
        return data

    def __getitem__(self, index: int) -> bytes:
        path = self.path(index)
        shown = redact(path if split_protocol(path)[0] else f"{self._protocol}://{path}")
        return self.policy.run(
            lambda: run_with_timeout(lambda: self._read(path), self.timeout), f"reading {shown}", unknown=True
        )
