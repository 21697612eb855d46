"""The shared-memory batch transport: descriptors out, tensors of their own in, slots owned by the receiver."""

from __future__ import annotations

import collections
import glob
import os

import pytest
import torch

from torch_drt.nodes.transport import (
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
    out = r.unpack(packed, was_packed)
    assert torch.equal(out["x"], batch["x"]) and torch.equal(out["pair"].image, batch["pair"].image)
    assert isinstance(out["pair"], Pair) and out["pair"].label == 5
    assert not glob.glob(glob.escape(ring_prefix(os.getpid(), 900)) + "*")  # the receiver unlinked the ring
    r.close()


def test_a_slot_is_only_rewritten_when_named_again():
    w, r = writer(uid=1), RingReader()
    first, _ = w.pack(torch.full((1024,), 1.0), slot=0)
    second, _ = w.pack(torch.full((1024,), 2.0), slot=1)
    a = r.unpack(first, True)
    w.pack(torch.full((1024,), 3.0), slot=0)  # slot 0 was released by unpacking it
    assert float(a[0]) == 1.0  # the unpacked tensor has memory of its own
    assert float(r.unpack(second, True)[0]) == 2.0
    r.close()


def test_no_slot_or_no_large_tensor_means_the_ordinary_way():
    w = writer(uid=2)
    t = torch.zeros(1024)
    assert w.pack(t, slot=None) == (t, False)
    assert w.pack([1, 2, 3], slot=0) == ([1, 2, 3], False)
    assert RingReader().unpack([1, 2], False) == [1, 2]


def test_a_growing_ring_keeps_earlier_batches_readable():
    w, r = writer(uid=3), RingReader()
    small, _ = w.pack(torch.full((1024,), 4.0), slot=0)
    big, _ = w.pack(torch.full((1 << 16,), 5.0), slot=1)  # a new, larger ring file
    assert small.path != big.path
    assert float(r.unpack(small, True)[0]) == 4.0 and float(r.unpack(big, True)[-1]) == 5.0
    r.close()


def test_unlink_rings_removes_a_dead_workers_files():
    w = writer(uid=4)
    w.pack(torch.zeros(4096), slot=0)
    prefix = ring_prefix(os.getpid(), 904)
    assert glob.glob(glob.escape(prefix) + "*")
    unlink_rings(prefix)
    assert not glob.glob(glob.escape(prefix) + "*")
