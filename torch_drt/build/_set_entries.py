"""The set manifest's entry of each part, made as the part is reported done rather than when the set is published.

Publishing a set opens every part (``describe_part``: structure, manifest hash, recorded location). A build's
driver does that for each part as soon as it is reported written (or found reused), while the workers still write
the others, so the set's publish at the end (``finish_build``) only checks the parts against each other and writes
the set manifest. An entry made from a part that does not open keeps its error, which the publish raises at that
part's turn: the build reports it as it would have, and the set is the same, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torch_drt.build.report import PartOutcome
from torch_drt.locations.location import Location
from torch_drt.sets.cache_set import CacheSetPart
from torch_drt.sets.cache_set_publish import describe_part


class SetEntries:
    """The entries of a build's parts, by part index.

    Args:
        set_dir: the set directory (or URL).
        remote: ``storage_options`` and ``remote_config`` for a URL set directory.
    """

    def __init__(self, set_dir: Path | str, remote: Mapping[str, Any]) -> None:
        self.remote = dict(remote)
        self.location = Location.parse(set_dir, self.remote.get("storage_options"), self.remote.get("remote_config"))
        self._made: dict[int, CacheSetPart | Exception] = {}

    def add(self, outcome: PartOutcome) -> None:
        """Make the entry of ``outcome``'s part now when it was written or reused (else there is none to make)."""
        if outcome.status in ("written", "reused"):
            self._made[outcome.index] = self._make(outcome)

    def _make(self, outcome: PartOutcome) -> CacheSetPart | Exception:
        if outcome.path is None:  # never for a part written or reused
            return ValueError(f"part {outcome.name} ({outcome.status}) has no path")
        try:
            return describe_part(self.location, outcome.path, **self.remote)
        except Exception as e:  # raised again when the set is published, at this part's turn
            return e

    def entry(self, outcome: PartOutcome) -> Callable[[], CacheSetPart]:
        """The entry of ``outcome``'s part, to take when the set is published (made then when never added)."""

        def take() -> CacheSetPart:
            made = self._made.pop(outcome.index, None) or self._make(outcome)
            if isinstance(made, Exception):
                raise made
            return made

        return take
