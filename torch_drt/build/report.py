"""What a set build did: one outcome per part and the published set, if any."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PartStatus = Literal["written", "reused", "empty", "failed"]


@dataclass(frozen=True)
class PartOutcome:
    """The outcome of one part.

    Attributes:
        index: the part's position in the set.
        name: its cache name.
        status: ``"written"`` now, ``"reused"`` (published by an earlier run), ``"empty"`` (no sample: left out
            of the set) or ``"failed"`` (nothing published for it).
        path: the part cache (a path or URL), when written or reused.
        sample_count: its samples.
        row: for a failure caused by one input row, that row's position in the whole input.
        message: why it failed.
    """

    index: int
    name: str
    status: PartStatus
    path: Path | str | None = None
    sample_count: int = 0
    row: int | None = None
    message: str = ""

    def __str__(self) -> str:
        if self.status != "failed":
            return f"part {self.name}: {self.status}, {self.sample_count} samples"
        where = f", input row {self.row}" if self.row is not None else ""
        return f"part {self.name}{where}: {self.message}"


@dataclass(frozen=True)
class BuildReport:
    """The result of a set build.

    Attributes:
        name: the set's name.
        path: the published set directory (or URL), or None when the set was not published.
        parts: every part's outcome, in part order.
        message: why the set was not published (empty when it was).
    """

    name: str
    path: Path | str | None
    parts: tuple[PartOutcome, ...]
    message: str = ""

    @property
    def ok(self) -> bool:
        """True when the set is published."""
        return self.path is not None

    @property
    def failures(self) -> list[PartOutcome]:
        """The parts that failed."""
        return [p for p in self.parts if p.status == "failed"]

    @property
    def sample_count(self) -> int:
        """Samples in the parts written or reused."""
        return sum(p.sample_count for p in self.parts)

    def count(self, status: PartStatus) -> int:
        """How many parts ended with ``status``."""
        return sum(p.status == status for p in self.parts)

    def summary(self) -> str:
        """One line: what was published (or why not) and how many parts were written, reused, empty, failed."""
        counts = ", ".join(f"{self.count(s)} {s}" for s in ("written", "reused", "empty", "failed") if self.count(s))
        if self.ok:
            return f"published set {self.name} at {self.path}: {self.sample_count} samples in {counts} parts"
        return f"set {self.name} not published ({counts} parts): {self.message}"
