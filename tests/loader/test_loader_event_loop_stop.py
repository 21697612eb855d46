"""Stopping a loader's event loop ends the fetches still running on it before the dataset's ``aclose()``: a fetch
that went on during ``aclose()`` could open a new client session after the old one was closed, left unclosed at
exit (aiohttp's ResourceWarning, seen once under load with a thread loader over HttpDataset dropped mid-epoch)."""

from __future__ import annotations

import asyncio
import time

from torch_drt.loader._event_loop import EventLoopThread


def test_the_loops_tasks_end_before_the_datasets_aclose_and_none_runs_during_it():
    events: list[str] = []

    async def fetching() -> None:  # an item fetch of a batch a worker took, still running when the loader goes
        try:
            while True:
                events.append("fetch")
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    async def aclose() -> None:  # a dataset's: closing a session takes a few loop turns
        events.append("aclose")
        for _ in range(3):
            await asyncio.sleep(0)
        events.append("closed")

    thread = EventLoopThread()
    thread.start(aclose)
    thread.submit(fetching())
    deadline = time.monotonic() + 30
    while "fetch" not in events:
        assert time.monotonic() < deadline, "the fetch did not start"
        time.sleep(0.01)
    thread.stop(aclose)
    assert events[-2:] == ["aclose", "closed"], events[-10:]  # nothing ran during aclose()
    assert "cancelled" in events  # the fetch was ended first, not abandoned with the loop
    assert thread.loop is None


def test_a_stop_without_aclose_still_ends_the_loops_tasks():
    ended: list[bool] = []

    async def waiting() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append(True)

    thread = EventLoopThread()
    thread.start()
    future = thread.submit(waiting())
    thread.stop()
    assert ended == [True] and future.cancelled()
