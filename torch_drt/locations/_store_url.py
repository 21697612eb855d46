"""The URL a remote store is opened at: a ``scheme://location`` prefix that carries no secret (no credentials,
query or fragment: those go in ``storage_options``), so that every message may name it."""

from __future__ import annotations

from urllib.parse import urlsplit

from torch_drt.locations.location import split_protocol
from torch_drt.sources.template import redact


def check_url(url: str) -> str:
    """``url`` without a trailing ``/``.

    Raises:
        ValueError: for a URL with credentials, a query or a fragment, or no ``scheme://`` (naming it redacted).
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError(f"{redact(url)!r} is not a valid URL") from None
    if not split_protocol(url)[0]:
        raise ValueError(f"{redact(url)!r} is not a scheme://location URL")
    if "@" in parts.netloc or parts.query or parts.fragment or url.rstrip("?#") != url:
        raise ValueError(
            f"{redact(url)!r}: a cache URL must not carry credentials, a query or a fragment; "
            "pass credentials and endpoints in storage_options"
        )
    return url.rstrip("/")
