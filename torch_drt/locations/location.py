"""Where bytes live: the one place that decides whether a location is a local path or a remote URL.

The rule is fsspec's protocol rule: a string ``scheme://rest`` is a URL of that scheme, anything else (a
``Path``, a plain string) is a local path, and ``file://`` and ``local://`` URLs are local paths too. Every
public function that takes a location parses it here, once, at the door; code behind the door asks the parsed
``Location`` (``is_remote``, ``path``, ``url``) instead of looking for ``"://"`` again.

``Location.backend()`` is the one place that turns a location into the backend reading its bytes: a scheme's
backend is whatever class registered it (``register_backend``, as fsspec's ``register_implementation``);
``local.py`` registers ``file``, ``remote.py`` every other URL (through fsspec). A new backend (``gs://`` with its
own ranged reads, say) is one module that subclasses ``CacheBackend`` and calls ``register_backend``.
"""

from __future__ import annotations

import importlib
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from torch_drt._protocol import split_protocol

if TYPE_CHECKING:
    from torch_drt.locations.base import CacheBackend


_LOCAL_SCHEMES = frozenset({"file", "local"})
ANY_URL = "*"  # the backend of a URL whose scheme registered none of its own
_BACKENDS: dict[str, type[CacheBackend]] = {}
# torch_drt's own backends, imported by name on first use (fsspec's ``known_implementations``): each module
# registers its schemes when imported, so a built-in backend is its module plus one line here
_BUILT_IN = {"file": "torch_drt.locations.local", ANY_URL: "torch_drt.locations.remote"}


def register_backend(scheme: str, backend: type[CacheBackend], *, replace: bool = False) -> None:
    """Make ``backend`` read the locations of ``scheme`` (``"file"``: local paths; ``ANY_URL``: every URL whose
    scheme has no backend of its own).

    Args:
        scheme: a URL scheme (lower case, no ``://``).
        backend: a ``CacheBackend`` subclass; ``backend.from_location(location)`` makes one.
        replace: allow replacing a backend already registered for ``scheme``.

    Raises:
        ValueError: for a malformed scheme, or one already registered to another backend without ``replace``.
    """
    if not isinstance(scheme, str) or not (scheme == ANY_URL or re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme)):
        raise ValueError(f"{scheme=} is not a lower-case URL scheme")
    if scheme in _BACKENDS and _BACKENDS[scheme] is not backend and not replace:
        raise ValueError(f"{scheme=} is read by {_BACKENDS[scheme].__name__} already (pass replace=True)")
    _BACKENDS[scheme] = backend


def _registered(scheme: str) -> type[CacheBackend] | None:
    """The backend registered for ``scheme``, importing torch_drt's own module for it first when it is built in."""
    if scheme not in _BACKENDS and scheme in _BUILT_IN:
        importlib.import_module(_BUILT_IN[scheme])
    return _BACKENDS.get(scheme)


def is_url(location: object) -> bool:
    """True for a string that names a remote location (``scheme://...`` other than ``file://``/``local://``)."""
    if not isinstance(location, str):
        return False
    scheme, _ = split_protocol(location)
    return bool(scheme) and scheme not in _LOCAL_SCHEMES


def _redact(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}"


@dataclass(frozen=True, repr=False)
class Location:
    """A local directory or file, or a remote URL, with the options that reach it.

    Build one with ``Location.parse``. Options and the remote configuration travel with the location but never
    show in its ``repr`` or ``redacted()`` form, and do not take part in equality.

    Attributes:
        target: a ``Path`` for a local location, the URL (no trailing ``/``) for a remote one.
        storage_options: fsspec options for a remote location (credentials, endpoint).
        remote_config: remote settings (a ``RemoteConfig``) for a remote location.
    """

    target: Path | str
    storage_options: Mapping[str, Any] | None = field(default=None, compare=False)
    remote_config: Any = field(default=None, compare=False)

    @classmethod
    def parse(
        cls,
        location: str | os.PathLike[str] | Location,
        storage_options: Mapping[str, Any] | None = None,
        remote_config: Any = None,
    ) -> Location:
        """The location ``location`` names.

        Args:
            location: a path, a URL or a ``Location`` (kept, with the options given here replacing its own).
            storage_options: fsspec options for a URL.
            remote_config: remote settings for a URL.

        Raises:
            TypeError: ``location`` is not a str, a path-like or a ``Location``.
        """
        if isinstance(location, Location):
            if storage_options is None and remote_config is None:
                return location
            return replace(
                location,
                storage_options=location.storage_options if storage_options is None else storage_options,
                remote_config=location.remote_config if remote_config is None else remote_config,
            )
        if isinstance(location, os.PathLike):
            return cls(Path(location), storage_options, remote_config)
        if not isinstance(location, str):
            raise TypeError(f"a location must be a str, a path or a Location, got {type(location).__name__}")
        scheme, rest = split_protocol(location)
        if not scheme:
            return cls(Path(location), storage_options, remote_config)
        if scheme in _LOCAL_SCHEMES:
            return cls(Path(rest), storage_options, remote_config)
        return cls(location.rstrip("/"), storage_options, remote_config)

    @property
    def is_remote(self) -> bool:
        """True for a URL."""
        return isinstance(self.target, str)

    @property
    def path(self) -> Path:
        """The local path.

        Raises:
            ValueError: for a remote location.
        """
        if isinstance(self.target, str):
            raise ValueError(f"{self.redacted()!r} is a remote location, not a local path")
        return self.target

    @property
    def url(self) -> str:
        """The URL.

        Raises:
            ValueError: for a local location.
        """
        if not isinstance(self.target, str):
            raise ValueError(f"{str(self.target)!r} is a local path, not a URL")
        return self.target

    @property
    def scheme(self) -> str:
        """The URL's scheme (``s3``, ``https``, ...), ``"file"`` for a local location."""
        return split_protocol(self.target)[0] if isinstance(self.target, str) else "file"

    def join(self, *names: str) -> Location:
        """The location of ``names`` below this one (``/``-separated, ``..`` resolved for URLs)."""
        if isinstance(self.target, str):
            scheme, rest = split_protocol(self.target)
            target: Path | str = f"{scheme}://{posixpath.normpath(posixpath.join(rest, *names))}"
        else:
            target = Path(os.path.normpath(self.target.joinpath(*names)))
        return replace(self, target=target)

    @property
    def name(self) -> str:
        """The last component (a file's name)."""
        return split_protocol(self.target)[1].rpartition("/")[2] if isinstance(self.target, str) else self.target.name

    @property
    def parent(self) -> Location:
        """The location one level up (a URL's bucket has ``scheme://`` above it)."""
        if isinstance(self.target, str):
            scheme, rest = split_protocol(self.target)
            return replace(self, target=f"{scheme}://{rest.rpartition('/')[0]}")
        return replace(self, target=self.target.parent)

    def backend(self) -> CacheBackend:
        """The backend that reads this location's bytes (the one registered for its scheme, else the one for
        ``ANY_URL``), made with this location's options and remote configuration.

        Raises:
            ValueError: when no backend is registered for it.
        """
        backend = _registered(self.scheme) or (_registered(ANY_URL) if self.is_remote else None)
        if backend is None:
            raise ValueError(f"no backend reads {self.redacted()!r} (scheme {self.scheme!r})")
        return backend.from_location(self)

    def redacted(self) -> str:
        """The location as shown to people: a URL without credentials, query or fragment; a path as it is."""
        return _redact(self.target) if isinstance(self.target, str) else str(self.target)

    def __str__(self) -> str:
        return self.redacted()

    def __repr__(self) -> str:
        return f"Location({self.redacted()!r})"
