"""The first batches' downloads (``torch_drt.nodecache._warm_start``): the first batch's files download alone, the
other loading processes' files are taken (locked in the node cache) but their requests wait until every file of the
first batch ended; no more than ``threads`` requests are in flight at once; a fork does not wait for the files held
back."""

from __future__ import annotations

import threading
import time

import pytest

from torch_drt.nodecache import _warm_start

pytestmark = pytest.mark.timeout(120)


class GatedFile:
    """A download whose request is ``requested()`` (called ``calls`` times); it ends once ``release`` is set (or
    fails with ``fail``)."""

    def __init__(self, key: str, fail: bool = False, calls: int = 1) -> None:
        self.key, self.size, self.fail, self.calls = key, 1, fail, calls
        self.asking, self.sent, self.release, self.ended = (threading.Event() for _ in range(4))

    def fetch(self, optional: bool = False, requested=None) -> bool:
        self.asking.set()
        for _ in range(self.calls if requested is not None else 0):
            requested()
        self.sent.set()
        try:
            assert self.release.wait(60)
            if self.fail:
                raise OSError("the store refused")
            return True
        finally:
            self.ended.set()


def _settle() -> None:
    deadline = time.monotonic() + 60
    while _warm_start.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _warm_start.running()


def _not_sent(files: list[GatedFile]) -> bool:
    """None of ``files`` sent its request within a moment (they all asked)."""
    assert all(f.asking.wait(60) for f in files)
    time.sleep(0.2)
    return not any(f.sent.is_set() for f in files)


@pytest.mark.parametrize("fail", [False, True])
def test_the_other_files_wait_for_every_file_of_the_first_batch(fail):
    lead, rest = [GatedFile(f"a{i}", fail) for i in range(2)], [GatedFile(f"b{i}") for i in range(2)]
    try:
        _warm_start.fetch_now([*lead, *rest], threads=4, first=2)
        assert all(f.sent.wait(60) for f in lead)
        assert _not_sent(rest), "a later batch's request went out with the first batch's in flight"
        assert _warm_start.wait_taken(60)  # a fork does not wait for the files held back
        lead[0].release.set()
        assert lead[0].ended.wait(60)
        assert _not_sent(rest), "a later batch's request went out before the whole first batch ended"
        lead[1].release.set()  # (a failed download counts as ended too)
        assert all(f.sent.wait(60) for f in rest)
    finally:
        for f in [*lead, *rest]:
            f.release.set()
        _settle()


def test_no_more_than_threads_requests_are_in_flight():
    lead, rest = GatedFile("a"), [GatedFile(f"b{i}") for i in range(3)]
    try:
        _warm_start.fetch_now([lead, *rest], threads=2, first=1)  # one thread each for the held-back files
        lead.release.set()
        assert lead.ended.wait(60)
        deadline = time.monotonic() + 60
        while sum(f.sent.is_set() for f in rest) < 2:
            assert time.monotonic() < deadline, "the held-back files' requests did not go out"
            time.sleep(0.01)
        waiting = [f for f in rest if not f.sent.is_set()]
        assert len(waiting) == 1 and _not_sent(waiting), "more than two requests went out at once"
        next(f for f in rest if f.sent.is_set()).release.set()
        assert waiting[0].sent.wait(60)
    finally:
        for f in [lead, *rest]:
            f.release.set()
        _settle()


def test_a_request_announced_twice_counts_once():
    first = GatedFile("d0", calls=2)  # (a download may call ``requested`` again: one request in flight still)
    second = GatedFile("d1")
    try:
        _warm_start.fetch_now([first, second], threads=1, first=2)
        assert first.sent.wait(60)
        first.release.set()
        assert second.sent.wait(60), "a request announced twice kept a place in flight after it ended"
    finally:
        for f in (first, second):
            f.release.set()
        _settle()


def test_without_a_first_batch_every_file_goes_in_order():
    files = [GatedFile(f"c{i}") for i in range(3)]
    try:
        _warm_start.fetch_now(files, threads=3)
        assert all(f.sent.wait(60) for f in files)
    finally:
        for f in files:
            f.release.set()
        _settle()
