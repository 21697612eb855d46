"""Issue 12's done-when: a typical torch training script's loader block runs unchanged except for the import."""

from __future__ import annotations

import json

from script_runner import run_script

TORCH_IMPORT = "from torch.utils.data import DataLoader"
DROP_IN_IMPORT = "from torch_drt import StatefulDataLoader as DataLoader"

# The loader part of a training script as torch's tutorials write it: a map-style dataset with the usual keywords
# (shuffle, workers, pinning, persistent workers, prefetching, a worker_init_fn seeding numpy and random, a seeded
# generator), and a sharded IterableDataset. Only the DataLoader import differs between the two runs.
SCRIPT = '''
import json
import random

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info
{import_line}


class FashionLike(Dataset):
    def __init__(self, n=96):
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand(n, 1, 8, 8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.images[idx], self.labels[idx]


class ShardedStream(IterableDataset):
    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        worker_info = get_worker_info()
        if worker_info is None:
            iter_start, iter_end = self.start, self.end
        else:
            per_worker = int(np.ceil((self.end - self.start) / float(worker_info.num_workers)))
            iter_start = self.start + worker_info.id * per_worker
            iter_end = min(iter_start + per_worker, self.end)
        return iter(range(iter_start, iter_end))


def seed_worker(worker_id):
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


if __name__ == "__main__":
    g = torch.Generator()
    g.manual_seed(0)
    training_data = FashionLike()
    train_dataloader = DataLoader(
        training_data,
        batch_size=16,
        shuffle=True,
        num_workers=2,
        pin_memory=torch.cuda.is_available(),
        drop_last=True,
        worker_init_fn=seed_worker,
        generator=g,
        persistent_workers=True,
        prefetch_factor=2,
    )
    test_dataloader = DataLoader(training_data, batch_size=32)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen, steps = [], 0
    for epoch in range(2):
        for X, y in train_dataloader:
            loss = torch.nn.functional.cross_entropy(model(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen.append(sorted(y.tolist()))
            steps += 1
    evaluated = sum(len(y) for X, y in test_dataloader)
    stream = [x.tolist() for x in DataLoader(ShardedStream(3, 7), num_workers=2)]
    print(json.dumps({{"steps": steps, "batches": len(train_dataloader), "evaluated": evaluated, "stream": stream,
                      "labels": sorted(x for batch in seen for x in batch)}}))
'''


def run(import_line: str) -> dict:
    proc = run_script(SCRIPT.format(import_line=import_line), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_loader_block_of_a_torch_tutorial_runs_unchanged():
    theirs = run(TORCH_IMPORT)
    ours = run(DROP_IN_IMPORT)
    assert ours["steps"] == theirs["steps"] == 12 and ours["batches"] == theirs["batches"] == 6
    assert ours["evaluated"] == theirs["evaluated"] == 96
    assert sorted(ours["stream"]) == sorted(theirs["stream"]) == [[3], [4], [5], [6]]
    assert ours["labels"] == theirs["labels"]  # the same items (drop_last drops other ones: 96 = 6 x 16)
