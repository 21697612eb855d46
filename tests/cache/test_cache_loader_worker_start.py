"""The cache loader's worker processes start as torch's workers do: ``get_worker_info()`` set, the global
generators seeded from the loader's seed, then ``worker_init_fn(worker_id)`` (issue 12's worker contract)."""

from __future__ import annotations

import json
import os
from functools import partial

import pytest
import torch
from conftest import QUIET, ListSource

import torch_drt as drt


def record(out_dir: str, worker_id: int) -> None:
    info = torch.utils.data.get_worker_info()
    facts = {"id": info.id, "num_workers": info.num_workers, "seed": info.seed, "initial_seed": torch.initial_seed(),
             "worker_id": worker_id}
    with open(os.path.join(out_dir, f"{os.getpid()}.json"), "w") as f:
        json.dump(facts, f)


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources([ListSource("l", 40)], tmp_path / "caches",
                                     reader_config=drt.ReaderConfig(seed=3), writer_config=QUIET)


def started(dataset, out, seed: int) -> list[dict]:
    out.mkdir()
    loader = dataset.to_torch_dataloader(collate_fn=len, batch_size=8, num_workers=2, seed=seed, shuffle=True,
                                         multiprocessing_context="fork", worker_init_fn=partial(record, str(out)))
    assert sum(loader) == 40
    return sorted((json.loads(p.read_text()) for p in out.iterdir()), key=lambda f: f["id"])


def test_workers_get_their_info_and_seeds_from_the_loader_seed(dataset, tmp_path):
    first = started(dataset, tmp_path / "a", seed=11)
    assert [(f["id"], f["worker_id"], f["num_workers"]) for f in first] == [(0, 0, 2), (1, 1, 2)]
    assert all(f["seed"] == f["initial_seed"] for f in first) and first[0]["seed"] + 1 == first[1]["seed"]
    assert [f["seed"] for f in started(dataset, tmp_path / "b", seed=11)] == [f["seed"] for f in first]
    assert [f["seed"] for f in started(dataset, tmp_path / "c", seed=12)] != [f["seed"] for f in first]
