"""sources._deadlines: one timer for the time limits of many attempts, on a real event loop."""

from __future__ import annotations

import asyncio

import pytest

from torch_drt.sources._deadlines import Deadlines


async def attempt(deadlines: Deadlines, seconds: float, swallow: bool = False) -> str:
    """An attempt as HttpDataset's: 'done', 'timed out' (the timer's cancellation), or cancelled."""
    task = deadlines.start()
    try:
        await asyncio.sleep(seconds)
        return "done"
    except asyncio.CancelledError:
        if swallow:
            return "swallowed"
        if not deadlines.expired(task):
            raise
    finally:
        deadlines.stop(task)
    return "timed out"


def test_only_the_overdue_attempts_time_out_and_the_task_is_not_left_cancelling():
    async def main():
        deadlines = Deadlines(0.2)
        tasks = [asyncio.create_task(attempt(deadlines, s)) for s in (0, 30, 0, 30)]
        results = await asyncio.gather(*tasks)
        assert not deadlines._running and not deadlines._expired
        deadlines.close()
        return results, [t.cancelling() for t in tasks]

    assert asyncio.run(main()) == (["done", "timed out", "done", "timed out"], [0, 0, 0, 0])


def test_the_timer_cancels_no_attempt_before_its_deadline():
    async def main():
        deadlines = Deadlines(30)
        task = asyncio.create_task(attempt(deadlines, 0.01))
        await asyncio.sleep(0)  # the attempt starts
        deadlines._check()  # the timer fires early (armed for an attempt that ended since): nothing is cancelled
        assert deadlines._timer is not None  # armed again, for the running attempt's deadline
        assert await task == "done" and task.cancelling() == 0
        deadlines.close()

    asyncio.run(main())


def test_another_cancellation_is_not_turned_into_a_time_out():
    async def main():
        deadlines = Deadlines(0)
        task = asyncio.create_task(attempt(deadlines, 30))
        await asyncio.sleep(0)  # the attempt starts
        task.cancel()  # the caller's cancellation, and the timer's at the same time
        deadlines._check()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not deadlines._expired
        deadlines.close()

    asyncio.run(main())


def test_a_cancellation_the_attempt_swallowed_is_taken_back():
    async def main():
        deadlines = Deadlines(0)
        task = asyncio.create_task(attempt(deadlines, 30, swallow=True))
        await asyncio.sleep(0)
        deadlines._check()
        assert await task == "swallowed" and task.cancelling() == 0 and not deadlines._expired
        deadlines.close()

    asyncio.run(main())


def test_one_attempt_per_task_at_a_time():
    async def main():
        deadlines = Deadlines(1)
        task = deadlines.start()
        try:
            with pytest.raises(RuntimeError, match="one at a time"):
                deadlines.start()
        finally:
            deadlines.stop(task)
            deadlines.close()
        assert deadlines._timer is None

    asyncio.run(main())
