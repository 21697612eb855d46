"""``to_torch_dataloader(shard_window="auto")`` over caches at URLs (issue 28): the window is chosen from the
statistics (download wait against the node cache's capacity) once an epoch's last batch was delivered, never
mid-epoch; the checkpoint keeps it, so a resume mid-epoch or at the boundary reads what an uninterrupted run reads.

The loader tests stub ``decide`` (the rule) so the windows are known; the rule itself is tested on real
``StatsRecorder`` counts. Reads go to moto's S3 server through s3fs. Every loader is closed once read (a loader
finalised by the garbage collector inside another's read once deadlocked on the map lock: test_open_maps.py).
"""

from __future__ import annotations

import pytest
from conftest import QUIET, ListSource
from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401

import torch_drt as drt
from torch_drt._stage_clock import claim_bytes
from torch_drt.cache.loader._window_tune import START, STATE_KEY, EpochReads, WindowTune
from torch_drt.loader._stats_recorder import StatsRecorder

pytestmark = pytest.mark.timeout(240)
N, BATCH = 400, 10  # 40 shards of 10 rows


def ids(samples) -> list[int]:
    return [s.sample_id for s in samples]


@pytest.fixture(scope="module")
def url(tmp_path_factory, moto_endpoint):
    """The cache at a URL, published once: the tests only read it, each through a node cache of its own."""
    runtime = drt.DatasetRuntime(1)
    _local, url = publish_local(runtime, tmp_path_factory.mktemp("published"), moto_endpoint, n=N,
                                max_shard_bytes=4000, payload_bytes=400)
    runtime.close()
    return url


def remote(runtime, url, proxy, tmp_path, **config):
    return runtime.cached_dataset(url, reader_config=drt.ReaderConfig(seed=2), storage_options=options(proxy),
                                  remote_config=remote_config(tmp_path, **config))


def make(dataset, window="auto", **kwargs):
    return dataset.to_torch_dataloader(shuffle=True, seed=5, shard_window=window, batch_size=BATCH, collate_fn=ids,
                                       **kwargs)


def epochs(loader, n: int, delivered: list | None = None) -> list[list[int]]:
    """The rows of ``n`` epochs; the loader is closed after them (a loader left to the garbage collector while
    another one of the dataset reads can deadlock the reader: see the module docstring)."""
    out = []
    for _ in range(n):
        out.append([])
        for batch in loader:
            out[-1] += batch
            if delivered is not None:
                delivered[0] += 1
    loader.close()
    return out


def halving(loader, calls: list, delivered: list | None = None):
    """A ``decide`` that halves the window, noting the batches delivered before the call that asks it."""

    def decide(reads: EpochReads) -> int:
        calls.append(delivered[0] if delivered else None)
        return max(1, loader._window_tune.window // 2)

    return decide


@pytest.mark.parametrize("workers", [0, 2])
def test_the_window_changes_at_epoch_boundaries_only_and_a_resume_reads_the_same_rows(runtime, url, proxy, tmp_path,
                                                                                   workers):
    dataset = remote(runtime, url, proxy, tmp_path)
    kwargs = dict(num_workers=workers, multiprocessing_context="fork") if workers else dict(num_workers=0)
    loader = make(dataset, **kwargs)
    assert loader._window_tune.window == START  # min(START, capacity): the node cache holds 1 GiB
    calls, delivered = [], [0]
    loader._window_tune.decide = halving(loader, calls, delivered)
    first, second = epochs(loader, 2, delivered)
    assert calls == [N // BATCH - 1, 2 * N // BATCH - 1]  # asked once per epoch, by the call of its last batch
    assert sorted(first) == sorted(second) == list(range(N))
    assert first == epochs(make(dataset, window=START, **kwargs), 1)[0]  # epoch 0 reads the fixed window's order
    assert second == epochs(make(dataset, window=START // 2, **kwargs), 2)[1]  # epoch 1 the halved window's
    assert second != epochs(make(dataset, window=START, **kwargs), 2)[1]

    again = make(dataset, **kwargs)
    again._window_tune.decide = halving(again, [])
    it = iter(again)
    _ = [next(it) for _ in range(N // BATCH)]  # epoch 0, to its last batch: the next window is chosen
    boundary = again.state_dict()
    assert boundary[STATE_KEY] == {"window": START // 2, "epoch": 1, "capacity": loader._window_tune.capacity}
    it = iter(again)  # epoch 1
    head = [i for _ in range(7) for i in next(it)]
    middle = again.state_dict()

    for state, rest in ((boundary, second), (middle, second[len(head):])):
        resumed = make(dataset, **kwargs)
        resumed._window_tune.decide = halving(resumed, [])
        resumed.load_state_dict(state)
        assert resumed._window_tune.window == START // 2
        assert epochs(resumed, 1)[0] == rest
    again.close()


def test_the_ceiling_is_what_the_node_cache_holds(runtime, url, proxy, tmp_path):
    dataset = remote(runtime, url, proxy, tmp_path, cache_limit=1 << 30)
    assert WindowTune.of(dataset, consumers=1, world_size=1).capacity == 40  # the shards there are
    shard = max(size for _, size in dataset.layouts[0].shards)
    small = remote(runtime, url, proxy, tmp_path / "small", cache_limit=2 * 3 * shard + 1)
    tune = WindowTune.of(small, consumers=1, world_size=1)
    assert tune.capacity == 3 and tune.window == 3  # the windows fit in half the node cache
    assert WindowTune.of(small, consumers=3, world_size=1).capacity == 1


def test_auto_is_refused_for_local_caches(runtime, tmp_path):
    local = runtime.from_cache_sources([ListSource("r", 20)], tmp_path / "caches",
                                       reader_config=drt.ReaderConfig(seed=1), writer_config=QUIET)
    with pytest.raises(ValueError, match="give a number for local caches"):
        make(local)
    with pytest.raises(ValueError, match="shard_window='wide' must be None, 'auto' or an int >= 1"):
        make(local, window="wide")


def recorder(wall: int, wait: int, **moved: int) -> StatsRecorder:
    stats = StatsRecorder()
    stats.wall_ns, stats.wait_ns, stats.bytes = wall, wait, dict(moved)
    return stats


def test_the_rule_halves_on_download_waits_doubles_otherwise_and_lowers_the_ceiling_on_thrash():
    claim_bytes()  # bytes earlier tests' prefetches counted outside a batch are not this test's
    tune = WindowTune(capacity=16, total_bytes=1000)
    assert tune.window == START
    waited_on_misses = recorder(100, 50, download=900, range_read=200, node_cache_hit=800)
    assert tune.end_epoch(waited_on_misses, 1) == START // 2 and tune.epoch == 1
    waited_on_hits = recorder(200, 100, download=900, range_read=200, node_cache_hit=8800)  # CPU-bound reads
    assert tune.end_epoch(waited_on_hits, 2) == START  # misses 0/8000 this epoch: the window widens again
    no_wait = recorder(300, 102)
    assert tune.end_epoch(no_wait, 3) == 2 * START and tune.end_epoch(recorder(400, 103), 4) is None  # the ceiling
    thrash = recorder(500, 104, download=900 + 1600)  # 1.6x the caches' bytes downloaded in one epoch
    assert tune.end_epoch(thrash, 5) == START and tune.capacity == START
    assert tune.state() == {"window": START, "epoch": 5, "capacity": START}
    with pytest.raises(ValueError, match=r"state\['shard_window_auto'\]\['window'\]"):
        tune.load({STATE_KEY: {"window": 0, "epoch": 1}})
