"""URLs shown to people (redacted) and sent on the wire (exactly as built)."""

from __future__ import annotations

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


def _split_http(url: str) -> SplitResult | None:
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        return None
    if _NOT_AUTHORITY.search(parts.netloc) or not url.isprintable():
        return None
    return parts


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

    parts = _split_http(url)
    if parts is None:
        raise ValueError(f"{redact(url)!r} is not an http(s) URL with a valid host")
    query = f"?{_NOT_URL.sub(_encode, parts.query)}" if parts.query else ""
    target = _NOT_URL.sub(_encode, parts.path or "/") + query
    try:
        user, password = (None if v is None else unquote(v) for v in (parts.username, parts.password))
        origin = str(URL.build(scheme=parts.scheme, user=user, password=password, host=parts.hostname, port=parts.port))
    except (ValueError, UnicodeError):
        origin = None
    if origin is None:
        raise ValueError(f"{redact(url)!r} is not an http(s) URL with a valid host")
    return URL(origin + target, encoded=True)
