"""The one test of whether a string carries a URL scheme (fsspec's ``split_protocol``).

It sits at the bottom layer so every package may ask it: ``locations`` builds ``Location.parse`` on it (which
schemes are local, which backend reads them), ``sources`` and the progress bars use it to name a store's protocol
or to decide what to redact. Nothing else looks for ``"://"`` (``tests/package/test_location.py`` checks).
"""

from __future__ import annotations


def split_protocol(location: str) -> tuple[str, str]:
    """``(scheme, rest)`` of ``scheme://rest`` (the scheme lower-cased); ``("", location)`` for a plain path.

    ``file://`` and ``local://`` carry a scheme too: ``torch_drt.locations.is_url`` and ``Location.parse`` say which
    schemes are local. A "scheme" with a ``/`` in it (``dir/x://y``) is part of a path.
    """
    scheme, sep, rest = location.partition("://")
    if not sep or not scheme or "/" in scheme:
        return "", location
    return scheme.lower(), rest
