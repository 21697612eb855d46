"""The shared-memory batch transport: descriptors out, tensors of their own in, slots owned by the receiver."""

from __future__ import annotations

import collections
import glob
import os

import pytest
import torch

from torch_drt._processes.transport import (
    RingReader,
    RingWriter,
    SharedMemoryTransport,
    SharedTensor,
    ring_prefix,
    unlink_rings,
)

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")

Pair = collections.namedtuple("Pair", "image label")


def writer(slots=3, uid=0):
    return RingWriter(SharedMemoryTransport(slots=slots, min_bytes=1024), ring_prefix(os.getpid(), 900 + uid))


def test_large_tensors_travel_as_descriptors_and_come_back_equal():
    w, r = writer(), RingReader()
    batch = {"x": torch.arange(4096, dtype=torch.float32).reshape(64, 64), "small": torch.ones(3),
             "pair": Pair(torch.full((2048,), 7, dtype=torch.int64), 5), "name": "b0"}
    packed, was_packed = w.pack(batch, slot=1)
    assert was_packed
    assert isinstance(packed["x"], SharedTensor) and isinstance(packed["pair"].image, SharedTensor)
    assert isinstance(packed["small"], torch.Tensor) and packed["name"] == "b0"  # small ones travel as they are
    released = []
    out = r.unpack(packed, was_packed, lambda: released.append(1))
    assert torch.equal(out["x"], batch["x"]) and torch.equal(out["pair"].image, batch["pair"].image)
    assert isinstance(out["pair"], Pair) and out["pair"].label == 5
    assert not glob.glob(glob.escape(ring_prefix(os.getpid(), 900)) + "*")  # the receiver unlinked the ring
    r.close()


def test_a_slot_is_released_when_the_last_view_of_its_batch_is_freed():
    w, r = writer(uid=1), RingReader()
    packed, _ = w.pack({"a": torch.full((1024,), 1.0), "b": torch.full((2048,), 2.0)}, slot=0)
    released = []
    out = r.unpack(packed, True, lambda: released.append(0))
    first = out["a"][:10]  # a view outlives its batch
    del out
    assert released == []  # "b" is gone, but a view of "a" still reads the slot
    assert float(first.sum()) == 10.0
    del first
    assert released == [0]  # now the worker may write slot 0 again
    r.close()


def test_pinned_or_plain_batches_release_their_slot_at_once():
    w, r = writer(uid=2), RingReader()
    t = torch.zeros(1024)
    assert w.pack(t, slot=None) == (t, False)
    assert w.pack([1, 2, 3], slot=0) == ([1, 2, 3], False)
    released = []
    assert r.unpack([1, 2], False, lambda: released.append(1)) == [1, 2]
    assert released == [1]


def test_a_growing_ring_keeps_earlier_batches_readable():
    w, r = writer(uid=3), RingReader()
    small, _ = w.pack(torch.full((1024,), 4.0), slot=0)
    a = r.unpack(small, True, lambda: None)
    big, _ = w.pack(torch.full((1 << 16,), 5.0), slot=1)  # a new, larger ring file
    assert small.path != big.path
    b = r.unpack(big, True, lambda: None)
    assert float(a[0]) == 4.0 and float(b[-1]) == 5.0  # the older mapping lives as long as its tensors
    r.close()
    assert float(a[-1]) == 4.0


def _allocated(packed: SharedTensor) -> int:
    return os.stat(packed.path).st_blocks * 512  # bytes the file holds in /dev/shm (not its size)


def test_a_rings_slots_take_memory_when_first_written():
    # the first batch of a worker does not wait for the whole ring to be allocated (zeroed): only its slot's
    w, slot_bytes = writer(slots=4, uid=5), 1 << 20
    try:
        first, _ = w.pack(torch.ones(slot_bytes, dtype=torch.uint8), slot=0)
        assert os.path.getsize(first.path) == 4 * slot_bytes
        assert _allocated(first) < 2 * slot_bytes
        third, _ = w.pack(torch.full((slot_bytes,), 3, dtype=torch.uint8), slot=2)
        assert third.path == first.path and 2 * slot_bytes <= _allocated(third) < 3 * slot_bytes
        r = RingReader()
        assert int(r.unpack(first, True, lambda: None).sum()) == slot_bytes
        assert int(r.unpack(third, True, lambda: None)[-1]) == 3
        r.close()
    finally:
        unlink_rings(ring_prefix(os.getpid(), 905))


def test_unlink_rings_removes_a_dead_workers_files():
    w = writer(uid=4)
    w.pack(torch.zeros(4096), slot=0)
    prefix = ring_prefix(os.getpid(), 904)
    assert glob.glob(glob.escape(prefix) + "*")
    unlink_rings(prefix)
    assert not glob.glob(glob.escape(prefix) + "*")


def test_two_pools_of_one_process_never_share_ring_file_names():
    """Each pool numbered its workers from 0, so two pools in one process (two loaders, or a pool restarted by the
    autotuner while the old one is still being closed) named their ring files alike, and closing one removed the
    other's files: a batch in flight then failed with FileNotFoundError."""
    from torch_drt._processes.pool import ProcessPool
    from torch_drt._processes.transport import SharedMemoryTransport, ring_prefix

    pools = [ProcessPool(abs, 1, "fork", SharedMemoryTransport(slots=2)) for _ in range(2)]
    try:
        prefixes = [ring_prefix(pool.pid, pool._workers[0].uid) for pool in pools]
        assert prefixes[0] != prefixes[1]
    finally:
        for pool in pools:
            pool.close()


def test_a_result_that_starts_with_none_is_searched_for_tensors():
    # a timed pool job returns (None, batch) when it is not recorded: the batch in it travels through the ring
    w, r = writer(uid=5), RingReader()
    big = torch.arange(2048, dtype=torch.float32)
    packed, was_packed = w.pack((None, Pair(big, [1, 2])), slot=0)
    assert was_packed and isinstance(packed[1].image, SharedTensor)
    out = r.unpack(packed, was_packed, lambda: None)
    assert out[0] is None and torch.equal(out[1].image, big) and out[1].label == [1, 2]
    r.close()


def test_a_label_then_tensor_pair_is_searched_for_tensors():
    w = writer(uid=7)
    packed, was_packed = w.pack((3, torch.zeros(4096)), slot=0)
    assert was_packed and packed[0] == 3 and isinstance(packed[1], SharedTensor)


def test_a_list_of_scalars_travels_as_it_is():
    w = writer(uid=6)
    indices = list(range(4096))
    packed, was_packed = w.pack(indices, slot=0)
    assert packed is indices and not was_packed
