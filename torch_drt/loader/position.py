"""LoaderPosition: the one owner of a loader's delivered position and of epoch rollover."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Cursor = dict[str, Any] | None  # the source node's state after the last delivered batch; None: the epoch's start


class LoaderPosition:
    """Where a loader's delivered stream stands: an epoch, a cursor within it, and whether an epoch is running.

    Iterators report through it only: ``finish_epoch()`` when an epoch's last batch was delivered, ``stop()`` when
    they are closed. While an epoch runs, the cursor is read from the pipeline (``read_cursor``: the source's
    state after the last *delivered* batch), so delivering a batch costs nothing here.

    Args:
        read_cursor: returns the running pipeline's delivered cursor.
        carry: the cursor the next epoch starts from, given the cursor an epoch ended at (default: None, the
            next epoch's plain start; a node carries its own state over, so it keeps counting its epochs).
    """

    def __init__(self, read_cursor: Callable[[], Cursor], carry: Callable[[Cursor], Cursor] | None = None) -> None:
        self._read = read_cursor
        self._carry = carry
        self.epoch = 0
        self._cursor: Cursor = None
        self.active = False
        self._pending: tuple[int, Cursor] | None = None

    def begin(self, at_end: Callable[[Cursor], bool], start: Callable[[int, Cursor], None]) -> tuple[int, Cursor]:
        """Start an epoch (``iter(loader)``): a loaded state, else the next epoch when one is running (as torch's
        loader does), else where the stream stands. A cursor at the very end of its epoch starts the next.

        ``start(epoch, cursor)`` resets the pipeline; if it raises, the position is left as it was.
        """
        if self._pending is not None:
            epoch, cursor = self._pending
        elif self.active:
            epoch, cursor = self.epoch + 1, None
        else:
            epoch, cursor = self.epoch, self._cursor
        if cursor is not None and at_end(cursor):
            epoch, cursor = epoch + 1, None
        if self.active:
            self.stop()
        start(epoch, cursor)
        self._pending = None
        self.epoch, self._cursor, self.active = epoch, cursor, True
        return epoch, cursor

    def cursor(self) -> Cursor:
        """The cursor of the delivered stream."""
        if self._pending is not None:
            return self._pending[1]
        return self._read() if self.active else self._cursor

    def snapshot(self) -> tuple[int, Cursor]:
        """``(epoch, cursor)`` as a checkpoint records it (a loaded state not yet started included)."""
        if self._pending is not None:
            return self._pending
        return self.epoch, self.cursor()

    def finish_epoch(self) -> None:
        """The epoch's last batch was delivered: the stream now stands at the start of the next epoch."""
        cursor = self._carry(self._read()) if self._carry is not None else None
        self.epoch, self._cursor, self.active = self.epoch + 1, cursor, False

    def stop(self) -> None:
        """The running iterator was closed: keep its delivered position, so the next ``iter()`` continues there."""
        if self.active:
            self._cursor, self.active = self._read(), False

    def load(self, epoch: int, cursor: Cursor) -> None:
        """Resume at ``(epoch, cursor)`` on the next ``iter()``.

        Raises:
            RuntimeError: while an epoch is running.
        """
        if self.active:
            raise RuntimeError("load_state_dict() while an iterator is active: exhaust or close it first")
        self._pending = (epoch, cursor)
