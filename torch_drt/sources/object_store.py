"""ObjectStoreDataset: item i is an object under the store and prefix of a URL, through fsspec."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from torch_drt.sources._base import DEFAULT_MAX_BYTES, Locations, check_size, make_policy
from torch_drt.sources._timed import run_with_timeout
from torch_drt.sources.template import redact

__all__ = ["ObjectStoreDataset"]

_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError)


class ObjectStoreDataset:
    """Objects of an fsspec store (s3://, gs://, az://, http(s)://, file://, memory://, ...).

    Credentials come from ``options`` (passed to the fsspec filesystem, e.g. ``key``/``secret``/
    ``client_kwargs`` for s3fs) and the usual environment variables (AWS_*, GOOGLE_*, AZURE_*). The filesystem is
    made lazily in each process, so the dataset pickles for process workers.

    Args:
        url: the store and prefix, e.g. ``"s3://bucket/tiles"``.
        keys: one key per item, relative to the prefix.
        options: fsspec filesystem options.
        timeout: seconds per request (None: 30).
        retries: further attempts after a transient failure (anything but not-found, permission and bad-input
            errors).
        backoff: base wait in seconds.
        max_backoff: longest wait.
        max_bytes: largest accepted object (checked from its size before reading, and after).

    Raises (from ``ds[i]``): ``OSError`` (with the attempt count), ``TimeoutError``, ``ValueError`` for an
    object over ``max_bytes``, ``IndexError``. Messages name objects without credentials or query strings.
    """

    def __init__(
        self,
        url: str,
        keys: Sequence[str] | Locations,
        *,
        options: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        import fsspec

        self.url, self.options = url, dict(options or {})
        self.locations = keys if isinstance(keys, Locations) else Locations(keys, "key")
        self.timeout = 30.0 if timeout is None else timeout
        self.max_bytes = max_bytes
        self.policy = make_policy(retries, backoff, max_backoff, max_bytes)
        self._fs, self._root = fsspec.core.url_to_fs(url, **self.options)  # validates the URL and options now
        self._protocol = url.split("://", 1)[0] if "://" in url else "file"

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

    def __len__(self) -> int:
        return len(self.locations)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fs"] = None
        return state

    def _filesystem(self) -> Any:
        if self._fs is None:
            import fsspec

            self._fs, self._root = fsspec.core.url_to_fs(self.url, **self.options)
        return self._fs

    def path(self, index: int) -> str:
        """The store path of item ``index``."""
        key = self.locations[index]
        return f"{self._root.rstrip('/')}/{key.lstrip('/')}" if self._root else key

    def _read(self, path: str) -> bytes:
        fs = self._filesystem()
        shown = f"{self._protocol}://{redact(path) if '://' in path else path}"
        try:
            size = fs.size(path)
        except _PERMANENT:
            raise
        except Exception:
            size = None
        check_size(size, self.max_bytes, shown)
        data = fs.cat_file(path)
        check_size(len(data), self.max_bytes, shown)
        return data

    def __getitem__(self, index: int) -> bytes:
        path = self.path(index)
        shown = f"{self._protocol}://{path}" if "://" not in path else redact(path)
        attempts = self.policy.attempts
        for attempt in range(attempts):
            try:
                return run_with_timeout(lambda: self._read(path), self.timeout)
            except ValueError:
                raise
            except _PERMANENT as e:
                raise type(e)(f"reading {shown} failed after {attempt + 1} attempt(s): {type(e).__name__}") from None
            except TimeoutError:
                if attempt == attempts - 1:
                    raise TimeoutError(
                        f"reading {shown} timed out after {self.timeout}s, {attempts} attempt(s)"
                    ) from None
            except Exception as e:  # transient by default: 5xx, throttling, connection errors
                if attempt == attempts - 1:
                    raise OSError(f"reading {shown} failed after {attempts} attempt(s): {type(e).__name__}") from None
            time.sleep(self.policy.delay(attempt))
        raise AssertionError("unreachable")
