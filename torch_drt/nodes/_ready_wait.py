"""Waiting for an ``OrderedMapper``'s next result: the oldest pending item's (in order) or any pending item's, woken
often so that Ctrl-C interrupts the wait promptly, up to the mapper's time-out."""

from __future__ import annotations

from typing import Any

from torch_drt.nodes._in_flight import InFlight

POLL_S = 0.1  # a waiting next() wakes this often, so Ctrl-C interrupts it promptly


def wait_ready(pool: Any, flight: InFlight, in_order: bool, timeout: float) -> int | None:
    """The index in ``flight`` of a pending item whose result ``pool`` holds, or None after ``timeout`` seconds.

    Args:
        pool: the ``ThreadPool`` or ``ProcessPool`` the items were submitted to.
        flight: the items submitted and not delivered yet.
        in_order: wait for the oldest pending item only (index 0); else for whichever is ready first.
        timeout: seconds to wait before giving up (0: forever); counted in wake-ups of ``POLL_S``.
    """
    waited = 0.0
    while True:
        if in_order:
            if pool.wait(flight.oldest(), POLL_S):
                return 0
        else:
            tasks = flight.tasks()
            ready = next((i for i, task in enumerate(tasks) if pool.done(task)), None)
            if ready is not None:
                return ready
            if pool.wait_any(tasks, POLL_S):
                continue
        waited += POLL_S
        if timeout and waited >= timeout:
            return None
