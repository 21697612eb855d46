"""The locality-aware shuffle (``shard_window``) on the redesigned cache loader and CachedDataset, local caches:
exact epochs, few shards per batch, one shared order across ranks and consumers, checkpoints, validation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

import torch_drt as drt
from torch_drt.cache.loader._snapshot import Snapshot, export_snapshot
from torch_drt.cache.rows import RowStream
from torch_drt.sampling.budget import consumer_plans

N = 120


def ids(samples) -> torch.Tensor:
    return torch.tensor([s.sample_id for s in samples])


@pytest.fixture
def cache(make_cache):
    return make_cache("win", n=N, max_shard_bytes=80)  # about 8 rows per shard


def _dataset(cache, **config) -> drt.CachedDataset:
    return drt.DatasetRuntime(1).cached_dataset(cache, reader_config=drt.ReaderConfig(**config))


def _epoch(loader) -> list[int]:
    return torch.cat(list(loader)).tolist()


def test_every_epoch_reads_every_row_once_a_few_shards_per_batch(cache):
    ds = _dataset(cache, seed=3, shard_window=2)
    shards = ds.reader.shard_groups(ds.active.cache_pos, ds.active.sample_ids)
    assert len(set(shards.tolist())) >= 12
    loader = ds.to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0)
    first, second = _epoch(loader), _epoch(loader)
    assert sorted(first) == sorted(second) == list(range(N)) and first != second
    for batch in loader:
        assert len(set(shards[batch.numpy()].tolist())) <= 2 * 2  # a batch may straddle two windows
    again = _dataset(cache, seed=3).to_torch_dataloader(collate_fn=ids, batch_size=8, num_workers=0, shard_window=2)
    assert _epoch(again) == first  # the argument and the ReaderConfig's setting are one order


@pytest.mark.parametrize("partition", ["replicate", "split"])
def test_the_consumers_of_all_ranks_cover_every_row_once_per_pass(cache, tmp_path, partition):
    ds = _dataset(cache, seed=5)
    passes: dict[int, list[int]] = {0: [], 1: []}
    for rank in (0, 1):
        plans = consumer_plans(
            N, samples=N, batch_size=10, workers=2, world_size=2, rank=rank, partition=partition, drop_last=False
        )
        snapshot = Snapshot(export_snapshot(ds.active, [ds.layouts[0].cache_id], tmp_path / f"{rank}.arrow"))
        for plan in plans:
            stream = RowStream.of_consumer(plans, plan.worker, snapshot, order="shard_window", seed=5,
                                           partition=partition, world_size=2, window=2, reader=ds.reader)
            for epoch in passes:
                passes[epoch] += stream.rows(epoch * plan.sample_count, plan.sample_count).tolist()
    assert sorted(passes[0]) == sorted(passes[1]) == list(range(N)) and passes[0] != passes[1]


def test_a_checkpoint_resumes_exactly_and_refuses_another_window(cache):
    ds = _dataset(cache, seed=1, shard_window=2)
    loader = ds.to_torch_dataloader(collate_fn=ids, batch_size=10, num_workers=0)
    it = iter(loader)
    head = [next(it).tolist() for _ in range(4)]
    state = loader.state_dict()
    tail = [b.tolist() for b in it]
    assert state["shard_window"] == 2 and len(head) == 4
    resumed = ds.to_torch_dataloader(collate_fn=ids, batch_size=10, num_workers=0)
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == tail
    other = ds.to_torch_dataloader(collate_fn=ids, batch_size=10, num_workers=0, shard_window=3)
    with pytest.raises(ValueError, match="shard_window=2"):
        other.load_state_dict(state)


def test_a_checkpoint_taken_before_shard_window_existed_loads(cache):
    ds = _dataset(cache, seed=1)
    loader = ds.to_torch_dataloader(collate_fn=ids, batch_size=10, num_workers=0)
    it = iter(loader)
    next(it)
    state = {k: v for k, v in loader.state_dict().items() if k != "shard_window"}
    tail = [b.tolist() for b in it]
    resumed = ds.to_torch_dataloader(collate_fn=ids, batch_size=10, num_workers=0)
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == tail


def test_a_shared_order_checkpoint_from_before_the_mirrored_blocks_is_refused_a_single_consumers_loads(cache):
    import torch_drt.compat.dataset_rt as compat  # a stream per loading worker: two workers share one order

    per_worker = compat.DatasetRuntime(1).cached_dataset(cache, reader_config=compat.ReaderConfig(seed=1,
                                                                                                 shard_window=2))
    kwargs = dict(collate_fn=ids, batch_size=10, num_workers=2, seed=1, verbose=False)
    state = per_worker.to_torch_dataloader(**kwargs).state_dict()
    assert state["shard_window_order"] == 2
    old = {k: v for k, v in state.items() if k != "shard_window_order"}  # taken by the previous release
    with pytest.raises(ValueError, match="shard_window_order=1"):
        per_worker.to_torch_dataloader(**kwargs).load_state_dict(old)
    ds = _dataset(cache, seed=1, shard_window=2)
    single = ds.to_torch_dataloader(collate_fn=ids, batch_size=10, num_workers=0)  # one consumer: the same order
    it = iter(single)
    next(it)
    state = {k: v for k, v in single.state_dict().items() if k != "shard_window_order"}
    assert single.state_dict()["shard_window_order"] is None
    tail = [b.tolist() for b in it]
    resumed = ds.to_torch_dataloader(collate_fn=ids, batch_size=10, num_workers=0)
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == tail


def test_bad_windows_and_unequal_weights_are_refused_before_loading(cache):
    ds = _dataset(cache, seed=1)
    for bad in (0, True, "2", 1.5):
        with pytest.raises(ValueError, match="shard_window"):
            ds.to_torch_dataloader(collate_fn=ids, num_workers=0, shard_window=bad)
    with pytest.raises(ValueError, match="needs shuffle=True"):
        ds.to_torch_dataloader(collate_fn=ids, num_workers=0, shuffle=False, shard_window=2)
    table = ds.get_metadata()
    weights = np.ones(N)
    weights[3] = 2.0
    ds.update_metadata(table.set_column(table.column_names.index("weight"), "weight", pa.array(weights)))
    with pytest.raises(ValueError, match="unequal weights"):
        ds.to_torch_dataloader(collate_fn=ids, num_workers=0, shard_window=2)


def test_an_explicit_sequential_pass_ignores_the_configured_window(cache):
    ds = _dataset(cache, seed=1, shard_window=2)
    loader = ds.to_torch_dataloader(collate_fn=ids, batch_size=16, num_workers=0, shuffle=False)
    assert _epoch(loader) == list(range(N)) and loader.shard_window is None


def test_reader_config_validates_the_window_and_dumps_it_only_when_set():
    for bad in (0, True, "2", 1.5):
        with pytest.raises(ValueError, match="shard_window"):
            drt.ReaderConfig(seed=0, shard_window=bad)
    with pytest.raises(ValueError, match="needs shuffle=True"):
        drt.ReaderConfig(seed=0, shard_window=2, shuffle=False)
    assert "shard_window" not in drt.ReaderConfig(seed=0).model_dump()  # dataset-rt's fields only
    config = drt.ReaderConfig(seed=0, shard_window=4)
    assert drt.ReaderConfig.model_validate_json(config.model_dump_json()) == config


def test_cached_dataset_iteration_is_exact_and_its_state_names_the_window(cache):
    ds = _dataset(cache, seed=7, shard_window=2)
    first = [s.sample_id for s in ds]
    assert sorted(first) == list(range(N)) and first != list(range(N))
    state = ds.state_dict()
    assert state["mode"] == "shard_window=2"
    with pytest.raises(ValueError, match="mode='shard_window=2'"):
        _dataset(cache, seed=7).load_state_dict(state)
    again = _dataset(cache, seed=7, shard_window=2)
    again.load_state_dict(state)
    assert sorted(s.sample_id for s in again) == list(range(N))
