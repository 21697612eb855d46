"""InFlight: the items an ``OrderedMapper`` submitted and has not delivered yet, and the source state its deliveries
stand at (what its checkpoint records)."""

from __future__ import annotations

from collections import deque
from typing import Any


class InFlight:
    """Submitted items in submission order, each with the source's state after it, and the delivered state.

    Delivering the oldest item moves the delivered state to the source's state after it. Out of order (torch's
    ``in_order=False``), an item delivered before an older one is set aside (``ahead``) until every older one is
    delivered; the delivered state then moves to the newest item of that joined prefix.

    Attributes:
        delivered: the source's state after the last item delivered in order (None: nothing in flight was
            delivered since the source was last read directly, so the source's own state is the delivered one).
    """

    def __init__(self) -> None:
        self._pending: deque[tuple[int, dict[str, Any], Any, Any]] = deque()  # (seq, state after, task, item)
        self._ahead: list[tuple[int, dict[str, Any], Any]] = []  # delivered before an older item: (seq, state, item)
        self._seq = 0
        self.delivered: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, state: dict[str, Any], task: Any, item: Any) -> None:
        """Record a submitted ``item`` (its pool ``task``), after which the source's state is ``state``."""
        self._seq += 1
        self._pending.append((self._seq, state, task, item))

    def oldest(self) -> Any:
        """The oldest pending task."""
        return self._pending[0][2]

    def tasks(self) -> list[Any]:
        """The pending tasks, oldest first."""
        return [entry[2] for entry in self._pending]

    def take(self, index: int) -> Any:
        """Take pending item ``index`` (0: the oldest) out as delivered; returns its task."""
        seq, state, task, item = self._pending[index]
        del self._pending[index]
        if index:
            self._ahead.append((seq, state, item))
            return task
        self.delivered = state
        if self._ahead:  # items delivered ahead of this one that now follow the delivered prefix
            head = self._pending[0][0] if self._pending else self._seq + 1
            joined = [entry for entry in self._ahead if entry[0] < head]
            if joined:
                self.delivered = max(joined, key=lambda entry: entry[0])[1]
                self._ahead = [entry for entry in self._ahead if entry[0] >= head]
        return task

    def state(self, source: Any, held: tuple[Any, ...] = ()) -> dict[str, Any]:
        """``source``'s state that the deliveries stand at (what a checkpoint records).

        Args:
            source: the node the items come from.
            held: ``(item,)`` for an item taken from ``source`` whose mapping was interrupted (it comes next).

        Returns:
            After an item was delivered ahead of an older one, the state before the oldest undelivered item with
            the items delivered ahead of it, which a resume skips (``source.state_before(item, ahead)``); else the
            state before ``held``; else the delivered state (``source``'s own when None). Without
            ``state_before``, the delivered state.
        """
        if hasattr(source, "state_before"):
            if self._ahead:
                return source.state_before(self._pending[0][3], [item for _, _, item in self._ahead])
            if held:
                return source.state_before(*held)
        return source.state_dict() if self.delivered is None else self.delivered

    def clear(self) -> list[Any]:
        """Forget every pending item; returns their tasks (for the pool to drop)."""
        tasks = self.tasks()
        self._pending.clear()
        self._ahead.clear()
        return tasks
