"""URLs shown to people (redacted) and sent on the wire (exactly as built)."""

from __future__ import annotations

import functools
import re
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

# a character a URL may hold as it is (RFC 3986 unreserved, reserved and valid %XX escapes); others are encoded
_NOT_URL = re.compile(r"%(?![0-9A-Fa-f]{2})|[^A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]")
_NOT_AUTHORITY = re.compile(r"[\x00-\x20\x7f\"<>\\^`{|}/?#]")  # an international host name is fine


def redact(url: str) -> str:
    """``url`` without its credentials, query and fragment (for messages, reprs and logs).

    A string that is not ``scheme://authority/path`` (a bare path is kept) shows only its scheme.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if not parts.scheme:
        return parts.path
    if not url[len(parts.scheme) :].startswith("://"):
        return f"{parts.scheme}:<redacted>"
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}"


@functools.lru_cache(maxsize=256)
def _origin(scheme: str, netloc: str) -> str | None:
    """``scheme://netloc`` as it goes on the wire (host IDNA-encoded), or None unless it is http(s) with a valid
    host and port (one check per origin: a dataset's URLs mostly share theirs)."""
    from yarl import URL

    try:
        parts = urlsplit(f"{scheme}://{netloc}")  # urlsplit's own checks (IPv6 brackets, port range) included
        if (parts.scheme, parts.netloc) != (scheme, netloc) or scheme not in ("http", "https"):
            return None
        if not parts.hostname or parts.port == 0:
            return None
        if _NOT_AUTHORITY.search(netloc) or not netloc.isprintable():
            return None
        user, password = (None if v is None else unquote(v) for v in (parts.username, parts.password))
        return str(URL.build(scheme=scheme, user=user, password=password, host=parts.hostname, port=parts.port))
    except (ValueError, UnicodeError):
        return None


def _split_http(url: str) -> tuple[SplitResult, str] | None:
    """The parts of ``url`` and its wire origin, or None unless it is a printable http(s) URL with a valid host."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    origin = _origin(parts.scheme, parts.netloc)
    return None if origin is None or not url.isprintable() else (parts, origin)


def check_http_url(url: str) -> str:
    """Return ``url`` when it is an http(s) URL with a host.

    Raises:
        ValueError: naming the redacted URL.
    """
    if _split_http(url) is None:
        raise ValueError(f"{redact(url)!r} is not an http(s) URL with a valid host")
    return url


def _encode(match: re.Match[str]) -> str:
    return "".join(f"%{b:02X}" for b in match.group(0).encode())


def wire_url(url: str) -> Any:
    """The ``yarl.URL`` to request for ``url``: path and query byte for byte as built (``%26`` stays ``%26``),
    only characters a URL cannot hold percent-encoded (spaces, non-ASCII), the host IDNA-encoded, no fragment.

    Raises:
        ValueError: ``url`` is not an http(s) URL with a host (naming the redacted URL).
    """
    from yarl import URL

    # the common case, without urlsplit: "http(s)://netloc/..." whose path and query need no encoding and that has
    # no fragment and no empty query; its origin is checked (and cached) as in the general case below
    start = url.find("://") + 3
    end = url.find("/", start)
    if 6 < start < 10 and end > 0 and "#" not in url and url[-1] != "?" and not _NOT_URL.search(url, end):
        netloc = url[start:end]
        origin = None if "?" in netloc else _origin(url[: start - 3], netloc)
        if origin is not None:
            return URL(origin + url[end:], encoded=True)
    split = _split_http(url)
    if split is None:
        raise ValueError(f"{redact(url)!r} is not an http(s) URL with a valid host")
    parts, origin = split
    query = f"?{_NOT_URL.sub(_encode, parts.query)}" if parts.query else ""
    return URL(origin + _NOT_URL.sub(_encode, parts.path or "/") + query, encoded=True)
