"""ShardPrefetcher: it downloads the planned files within its bytes ahead, and a warm pipeline (every planned file
local and held) costs it nothing per batch: no presence checks and no woken download threads.

The files here are real files in ``tmp_path`` (``fetch`` writes one, ``present`` stats it, ``hold`` opens it): the
prefetcher sees them through its ``Fetchable`` protocol, the one the remote backend implements.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import torch_drt as drt
from torch_drt.nodecache.prefetch import ShardPrefetcher


class CountedFile:
    """A file of ``size`` bytes under ``root``, counting how often the prefetcher looks at it."""

    def __init__(self, root: Path, key: str, size: int = 10) -> None:
        self.key, self.size, self.path = key, size, root / key
        self.checks = 0
        self.holds = 0
        self.fetches = 0
        self.demoted = False
        self.lock = threading.Lock()

    def present(self) -> bool:
        with self.lock:
            self.checks += 1
        return self.path.exists()

    def fetch(self, optional: bool = False) -> bool:
        with self.lock:
            self.fetches += 1
        self.path.write_bytes(b"x" * self.size)
        return True

    def touch(self) -> None:
        if self.path.exists():
            self.path.touch()

    def demote(self) -> None:
        self.demoted = True

    def hold(self):
        with self.lock:
            self.holds += 1
        return self.path.open("rb") if self.path.exists() else None


def _wait(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_planned_files_within_the_bytes_ahead_are_fetched_once_in_order(tmp_path):
    files = [CountedFile(tmp_path, f"f{i}") for i in range(6)]
    prefetcher = ShardPrefetcher(concurrency=1, bytes_ahead=40)  # four 10-byte files ahead
    prefetcher.update(files)
    _wait(lambda: prefetcher.fetched == 4)
    time.sleep(0.1)
    assert [f.fetches for f in files] == [1, 1, 1, 1, 0, 0]
    prefetcher.update(files[2:])  # two read: two more come into view
    _wait(lambda: prefetcher.fetched == 6)
    assert [f.fetches for f in files] == [1] * 6


def test_a_plan_given_its_own_bytes_ahead_is_followed_that_far(tmp_path):
    """A loading process of a loader with several gets a share of the node cache's quarter
    (``RemoteConfig.bytes_ahead(share)``): its windows and its neighbours' add up in the node cache."""
    files = [CountedFile(tmp_path, f"f{i}") for i in range(6)]
    prefetcher = ShardPrefetcher(concurrency=1, bytes_ahead=1 << 20)
    prefetcher.update(files, bytes_ahead=20)  # two 10-byte files ahead
    _wait(lambda: prefetcher.fetched == 2)
    time.sleep(0.1)
    assert [f.fetches for f in files] == [1, 1, 0, 0, 0, 0]
    prefetcher.update(files[1:])  # without a bound of its own: the prefetcher's
    _wait(lambda: prefetcher.fetched == 6)
    assert [f.fetches for f in files] == [1] * 6


def test_the_node_caches_quarter_is_split_among_a_loaders_processes_not_prefetch_bytes():
    config = drt.RemoteConfig(cache_limit=8000, prefetch_bytes=1500)
    assert [config.bytes_ahead(), config.bytes_ahead(2), config.bytes_ahead(4)] == [1500, 1000, 500]
    assert drt.RemoteConfig(cache_limit=8000, prefetch_bytes=100).bytes_ahead(4) == 100


def test_a_warm_plan_costs_no_presence_checks_and_wakes_no_downloads(tmp_path):
    files = [CountedFile(tmp_path, f"f{i}") for i in range(8)]
    for f in files:
        f.fetch()
    prefetcher = ShardPrefetcher(concurrency=4, bytes_ahead=1 << 20)
    prefetcher.update(files)
    time.sleep(0.2)  # threads woken by the first plan settle
    before = sum(f.checks for f in files)
    for k in range(50):  # batches of a warm epoch: the same plan, then the plan losing its first files
        prefetcher.update(files[k // 10:])
    time.sleep(0.2)
    assert sum(f.checks for f in files) == before
    assert prefetcher.fetched == 0


class GatedFile(CountedFile):
    """A CountedFile whose download waits until ``gate`` opens."""

    def __init__(self, root: Path, key: str, gate: threading.Event) -> None:
        super().__init__(root, key)
        self.gate = gate
        self.started = threading.Event()

    def fetch(self, optional: bool = False) -> bool:
        self.started.set()
        self.gate.wait(10)
        return super().fetch()


def test_a_download_ending_does_not_look_at_every_file_of_a_long_plan(tmp_path):
    """A cold epoch's plan is hundreds of shards long: the end of each download looks at the file it fetched, not
    at each planned file again (which cost a stat per planned file per download, under the prefetcher's lock)."""
    files = [CountedFile(tmp_path, f"f{i}") for i in range(60)]
    prefetcher = ShardPrefetcher(concurrency=2, bytes_ahead=1 << 20)
    prefetcher.update(files)
    _wait(lambda: prefetcher.fetched == len(files))
    assert [f.fetches for f in files] == [1] * len(files)
    assert sum(f.holds for f in files) <= 2 * len(files), [f.holds for f in files]  # the plan's look, then its own
    prefetcher.update(files[1:])  # every file left is held: the warm plan looks at none of them again
    before = sum(f.checks + f.holds for f in files)
    prefetcher.update(files[2:])
    assert sum(f.checks + f.holds for f in files) == before


def test_after_a_start_the_first_reads_files_download_before_the_rest_of_the_plan(tmp_path):
    gate = threading.Event()
    files = [GatedFile(tmp_path, f"f{i}", gate) for i in range(6)]
    prefetcher = ShardPrefetcher(concurrency=6, bytes_ahead=1 << 20)
    prefetcher.update(files, first=2)  # the first batch needs f0 and f1
    _wait(lambda: files[0].started.is_set() and files[1].started.is_set())
    time.sleep(0.2)  # idle download threads would have taken the rest of the plan by now
    assert [f.started.is_set() for f in files] == [True, True, False, False, False, False]
    gate.set()
    _wait(lambda: prefetcher.fetched == 6)  # once they are here, the whole plan follows (no next plan needed:
    assert [f.fetches for f in files] == [1] * 6  # a loader's own process plans again only after a training step)


def test_in_a_loading_process_after_a_start_the_rest_of_the_plan_waits_for_the_next_plan(tmp_path):
    gate = threading.Event()
    files = [GatedFile(tmp_path, f"f{i}", gate) for i in range(6)]
    prefetcher = ShardPrefetcher(concurrency=6, bytes_ahead=1 << 20)
    prefetcher.update(files, first=2, hold=True)
    _wait(lambda: files[0].started.is_set() and files[1].started.is_set())
    gate.set()
    _wait(lambda: prefetcher.fetched == 2)
    time.sleep(0.2)  # the rest of the plan waits for the next plan: the first read has the CPU and network alone
    assert [f.started.is_set() for f in files] == [True, True, False, False, False, False]
    prefetcher.update(files)  # the next batch is planned (the same files: the plan is followed now)
    _wait(lambda: prefetcher.fetched == 6)
    assert [f.fetches for f in files] == [1] * 6


def test_after_a_start_whose_first_files_are_local_the_rest_waits_for_the_next_plan(tmp_path):
    """A loading process whose first batch's shards its parent downloaded: its read does not share the CPU with
    the lookahead's downloads."""
    files = [CountedFile(tmp_path, f"f{i}") for i in range(4)]
    files[0].fetch()
    prefetcher = ShardPrefetcher(concurrency=4, bytes_ahead=1 << 20)
    prefetcher.update(files, first=1, hold=True)
    time.sleep(0.2)
    assert prefetcher.fetched == 0
    prefetcher.update(files[1:])
    _wait(lambda: prefetcher.fetched == 3)


def test_in_a_running_pipeline_the_whole_plan_downloads_at_once(tmp_path):
    gate = threading.Event()
    files = [GatedFile(tmp_path, f"f{i}", gate) for i in range(4)]
    prefetcher = ShardPrefetcher(concurrency=4, bytes_ahead=1 << 20)
    prefetcher.update(files)
    _wait(lambda: all(f.started.is_set() for f in files))
    gate.set()
    _wait(lambda: prefetcher.fetched == 4)


def test_files_read_from_the_front_of_the_plan_are_demoted_the_others_not(tmp_path):
    files = [CountedFile(tmp_path, f"f{i}") for i in range(5)]
    for f in files:
        f.fetch()
    prefetcher = ShardPrefetcher(concurrency=1, bytes_ahead=20)  # two 10-byte files ahead
    prefetcher.update(files[:4])
    prefetcher.update([files[1], files[2], files[3]])  # f0 was read and no planned read needs it again
    assert [f.demoted for f in files] == [True, False, False, False, False]
    prefetcher.update([files[4]])  # another loader's plan: the files ahead (f1, f2) go, f3 is merely unplanned
    assert [f.demoted for f in files] == [True, True, True, False, False]


def test_only_the_files_coming_within_the_bytes_ahead_are_marked_recently_used(tmp_path):
    """A file the plan needs epochs from now (a loading process's plan holds every shard of its next batches) is
    not recently used: marked so, it would be kept over the shards read just now, which the next epoch (walking the
    shards backward) reads first. Files are marked as they come within the bytes ahead, the latest-needed first."""
    files = [CountedFile(tmp_path, f"f{i}") for i in range(6)]
    for f in files:
        f.fetch()
        os.utime(f.path, (100, 100))
    prefetcher = ShardPrefetcher(concurrency=1, bytes_ahead=20)  # two 10-byte files ahead
    prefetcher.update(files, first=1)
    assert [f.path.stat().st_mtime > 100 for f in files] == [True, True, False, False, False, False]
    assert files[0].path.stat().st_mtime_ns >= files[1].path.stat().st_mtime_ns  # the first needed: most recent
    prefetcher.update(files[1:])  # f0 read: f2 comes within the bytes ahead
    assert [f.path.stat().st_mtime > 100 for f in files] == [True, True, True, False, False, False]


def test_a_start_or_resume_demotes_nothing(tmp_path):
    """A plan given with ``first`` (a loader starting or resuming) says nothing about what was read: the files of
    the plan it replaces that it does not list (a longer lookahead, another loader's) are not demoted."""
    files = [CountedFile(tmp_path, f"f{i}") for i in range(5)]
    for f in files:
        f.fetch()
    prefetcher = ShardPrefetcher(concurrency=1, bytes_ahead=50)  # all five held
    prefetcher.update(files)
    prefetcher.update(files[:2], first=1)  # a resumed loader at the same position: its view fills later
    prefetcher.update([files[3]], first=1)  # a loader resumed elsewhere
    assert [f.demoted for f in files] == [False] * 5


class FlakyFile(CountedFile):
    """A CountedFile whose first download fails (a network error, say)."""

    def fetch(self, optional: bool = False) -> bool:
        if self.fetches == 0:
            with self.lock:
                self.fetches += 1
            raise OSError("connection reset")
        return super().fetch()


def test_a_file_whose_prefetch_failed_is_tried_again_on_the_next_plan(tmp_path):
    flaky = FlakyFile(tmp_path, "flaky")
    others = [CountedFile(tmp_path, f"f{i}") for i in range(3)]
    prefetcher = ShardPrefetcher(concurrency=2, bytes_ahead=1 << 20)
    prefetcher.update([flaky, *others])
    _wait(lambda: all(f.path.exists() for f in others) and flaky.fetches == 1)
    assert not flaky.path.exists()
    prefetcher.update([flaky, *others[1:]])  # the next plan (a read moved on): the failure is tried again
    _wait(lambda: flaky.path.exists())
    assert flaky.fetches == 2


def test_a_cold_running_plan_looks_at_each_file_once_while_it_is_in_view(tmp_path):
    """A cold epoch's plan comes every batch with hundreds of files not local yet: each is looked at when it comes
    into view, not again at every plan (a stat per planned file per batch, on the loading thread)."""
    gate = threading.Event()
    files = [GatedFile(tmp_path, f"f{i}", gate) for i in range(40)]
    prefetcher = ShardPrefetcher(concurrency=1, bytes_ahead=1 << 20)
    try:
        prefetcher.update(files)  # a running pipeline's plan (no first read to wait for)
        assert files[0].started.wait(10)  # the one download thread is busy meanwhile
        for k in range(20):  # the plans of the next batches, each losing the files read
            prefetcher.update(files[k // 4 :])
        assert [f.holds for f in files] == [1] * len(files)
    finally:
        gate.set()
    _wait(lambda: prefetcher.fetched == 37)  # the first file, then every file of the last plan
    assert [f.fetches for f in files] == [1] + [0] * 3 + [1] * 36


def test_looking_for_the_next_download_skips_the_files_already_held(tmp_path):
    """Each download thread looks for its next file from the front of the plan: the files held there (local) are
    not looked at again, so a cold epoch's downloads do not stat every file already fetched, under the lock."""
    files = [CountedFile(tmp_path, f"f{i}") for i in range(60)]
    prefetcher = ShardPrefetcher(concurrency=2, bytes_ahead=1 << 20)
    prefetcher.update(files)
    _wait(lambda: prefetcher.fetched == len(files))
    assert [f.fetches for f in files] == [1] * len(files)
    assert max(f.checks for f in files) <= 3, [f.checks for f in files]


class _Closing:
    """Garbage with a finalizer that withdraws the plan, as a collected loader's ``__del__`` does (its ``close``)."""

    def __init__(self, prefetcher: ShardPrefetcher) -> None:
        self.prefetcher, self.cycle = prefetcher, self

    def __del__(self) -> None:
        self.prefetcher.update([])


def test_a_collection_as_a_download_thread_starts_may_withdraw_the_plan(tmp_path, monkeypatch):
    """A garbage collection can run on a new thread before it reports started (``Thread.start`` waits for that),
    and a loader collected then withdraws its plan (the prefetcher's lock): a plan that starts the download threads
    while it holds that lock waited for ever (a loading process stuck in its first batch)."""
    import gc

    from torch_drt.nodecache import prefetch

    prefetcher = ShardPrefetcher(concurrency=2, bytes_ahead=100)
    files = [CountedFile(tmp_path, f"k{i}") for i in range(2)]

    class Collecting(threading.Thread):
        def _bootstrap_inner(self) -> None:  # (the collection runs first on the new thread)
            gc.collect()
            super()._bootstrap_inner()

    monkeypatch.setattr(prefetch, "threading", type("Threading", (), {"Thread": Collecting}))
    gc.disable()  # (the garbage is collected on the download thread, not before)
    try:
        _Closing(prefetcher)
        planning = threading.Thread(target=prefetcher.update, args=(files,), daemon=True)
        planning.start()
        planning.join(20)
    finally:
        gc.enable()
    assert not planning.is_alive(), "the plan waited for a download thread that waited for the plan's lock"
