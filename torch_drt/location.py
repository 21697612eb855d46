"""Where bytes live: the one place that decides whether a location is a local path or a remote URL.

The rule is fsspec's protocol rule: a string ``scheme://rest`` is a URL of that scheme, anything else (a
``Path``, a plain string) is a local path, and ``file://`` and ``local://`` URLs are local paths too. Every
public function that takes a location parses it here, once, at the door; code behind the door asks the parsed
``Location`` (``is_remote``, ``path``, ``url``) instead of looking for ``"://"`` again.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Location", "is_url"]

_LOCAL_SCHEMES = frozenset({"file", "local"})


def _split(location: str) -> tuple[str, str]:
    """``(scheme, rest)`` of ``scheme://rest``; ``("", location)`` for a plain path."""
    scheme, sep, rest = location.partition("://")
    if not sep or not scheme or "/" in scheme:
        return "", location
    return scheme.lower(), rest


def is_url(location: object) -> bool:
    """True for a string that names a remote location (``scheme://...`` other than ``file://``/``local://``)."""
    if not isinstance(location, str):
        return False
    scheme, _ = _split(location)
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
        scheme, rest = _split(location)
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
        return _split(self.target)[0] if isinstance(self.target, str) else "file"

    def join(self, *names: str) -> Location:
        """The location of ``names`` below this one (``/``-separated, ``..`` resolved for URLs)."""
        if isinstance(self.target, str):
            scheme, rest = _split(self.target)
            target: Path | str = f"{scheme}://{posixpath.normpath(posixpath.join(rest, *names))}"
        else:
            target = Path(os.path.normpath(self.target.joinpath(*names)))
        return replace(self, target=target)

    def redacted(self) -> str:
        """The location as shown to people: a URL without credentials, query or fragment; a path as it is."""
        return _redact(self.target) if isinstance(self.target, str) else str(self.target)

    def __str__(self) -> str:
        return self.redacted()

    def __repr__(self) -> str:
        return f"Location({self.redacted()!r})"
