"""Where a remote cache set's parts may lie: at the set's own origin, so its credentials never follow a document."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from torch_drt.cache.errors import CacheCorruptError
from torch_drt.sources.template import redact

if TYPE_CHECKING:
    from torch_drt.locations.remote_config import RemoteConfig


def _origin(location: Path | str) -> tuple[str, str]:
    """(scheme, host or bucket) of a location: where its storage options (credentials) are sent."""
    if isinstance(location, Path):
        return "file", ""
    parts = urlsplit(location)
    return parts.scheme.lower(), (parts.hostname or "") + (f":{parts.port}" if parts.port else "")


def check_origin(
    set_path: Path | str, manifest: str, recorded: str, part_path: Path | str, config: RemoteConfig | None
) -> None:
    """Refuse a part of a remote set (``set_path`` a URL) that lies at another origin (scheme, host or bucket)
    than the set, unless ``config.allow_foreign_parts``: the set's storage options, its credentials, are never
    sent where a downloaded ``cacheset.json`` points.

    Args:
        set_path: the set's directory or URL.
        manifest: the set manifest's file name (for messages).
        recorded: the part's location as the set manifest records it (shown redacted).
        part_path: where that location resolves to.
        config: the caller's remote settings.

    Raises:
        CacheCorruptError: naming the set manifest, the part and the opt-in.
    """
    if not isinstance(set_path, str) or (config is not None and config.allow_foreign_parts):
        return
    try:
        origin = _origin(set_path)
    except ValueError:  # an unparsable port, say
        origin = ("?", "?")
    try:
        theirs = _origin(part_path)
    except ValueError:
        theirs = ("", "")
    if theirs != origin:
        raise CacheCorruptError(
            f"{set_path}/{manifest}",
            f"part {redact(recorded)[:200]} lies outside the set's origin {origin[0]}://{origin[1]}: the set's "
            "storage options (credentials) are not sent there; to read parts from other locations on purpose, "
            "pass RemoteConfig(allow_foreign_parts=True) (and storage options that suit every location)",
        )
