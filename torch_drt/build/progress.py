"""The one progress bar of a build, shown by the driver (this process, rank 0 or the Ray driver)."""

from __future__ import annotations

import threading

__all__ = ["BuildProgress"]


class BuildProgress:
    """A thread-safe count of the build's input rows, shown as one tqdm bar when ``enabled``.

    Args:
        name: the set's name (the bar's label).
        total: the build's input rows, when known.
        enabled: show the bar (otherwise only count).
    """

    def __init__(self, name: str, total: int | None, *, enabled: bool) -> None:
        from tqdm.auto import tqdm

        self._lock = threading.Lock()
        self.done = 0
        self._bar = tqdm(total=total, desc=f"set {name}", unit=" rows", disable=not enabled, dynamic_ncols=True)

    def add(self, n: int) -> None:
        """Count ``n`` more rows."""
        with self._lock:
            self.done += n
            self._bar.update(n)

    def set(self, done: int) -> None:
        """Show ``done`` rows in all (counts reported by the workers)."""
        with self._lock:
            if done > self.done:
                self._bar.update(done - self.done)
                self.done = done

    def close(self) -> None:
        """Close the bar."""
        self._bar.close()

    def __enter__(self) -> BuildProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
