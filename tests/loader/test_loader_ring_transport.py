"""Process workers hand batches over through the shared-memory rings, with statistics on (the default)."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import Dataset

import torch_drt

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")


class Rows(Dataset):
    def __len__(self) -> int:
        return 512  # past the first batches, which statistics time (the rest go untimed: (None, batch))

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((4096,), float(i))  # batches of 128 KiB: over the ring's minimum


def test_process_workers_batches_arrive_through_the_ring_not_torchs_shared_memory():
    # torch's DataLoader sends each batch through a fresh shared-memory segment (is_shared); torch_drt's workers
    # write it into their ring, which the loader maps once: its batches are not torch shared-memory tensors
    loader = torch_drt.StatefulDataLoader(Rows(), batch_size=8, num_workers=2, multiprocessing_context="fork")
    firsts, shared = [], []
    for b in loader:  # each batch is dropped before the next (a kept batch keeps its slot: then torch's route)
        firsts.append(float(b[0, 0]))
        shared.append(b.is_shared())
    assert firsts == [8.0 * k for k in range(64)]
    assert not any(shared)
    torch_loader = torch.utils.data.DataLoader(Rows(), batch_size=8, num_workers=2, multiprocessing_context="fork")
    assert all(b.is_shared() for b in torch_loader)  # the observable tells the two routes apart
