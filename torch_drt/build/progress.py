"""The one progress bar of a build, shown by the driver (this process, rank 0 or the Ray driver)."""

from __future__ import annotations

import threading


class BuildProgress:
    """A thread-safe count of the build's input rows, shown as one bar when ``enabled`` and stderr is a terminal
    (``torch_drt._progress``).

    Args:
        name: the set's name (the bar's label).
        total: the build's input rows, when known.
        enabled: show the bar (otherwise only count).
    """

    def __init__(self, name: str, total: int | None, *, enabled: bool) -> None:
        from torch_drt._progress import Progress

        self._lock = threading.Lock()
        self.done = 0
        self._bar = Progress("build set", name, total, "rows") if enabled else None

    @property
    def shown(self) -> bool:
        """Whether the bar is drawn (else the counts have no reader: engines need not gather them while running)."""
        return self._bar is not None and self._bar.shown

    def add(self, n: int) -> None:
        """Count ``n`` more rows."""
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.add(n)

    def set(self, done: int) -> None:
        """Show ``done`` rows in all (counts reported by the workers)."""
        with self._lock:
            if done > self.done:
                if self._bar is not None:
                    self._bar.add(done - self.done)
                self.done = done

    def close(self) -> None:
        """Close the bar."""
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> BuildProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
