"""CachedDataset.to_torch_dataloader: budgets, workers, streams, resume and validation."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch
from conftest import ListSource
from torchdata.stateful_dataloader import StatefulDataLoader

import torch_drt as drt

QUIET = drt.WriterConfig(show_progress=False)


def sample_id(sample) -> int:
    return sample.sample_id


def ids(batch) -> list[int]:
    return [s.sample_id for s in batch]


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources([ListSource("l", 40)], tmp_path, reader_config=drt.ReaderConfig(seed=3),
                                     writer_config=QUIET)


def test_returns_a_stateful_dataloader_with_budgeted_batches(dataset):
    loader = dataset.to_torch_dataloader(collate_fn=list, batch_size=8, samples_per_epoch=32)
    assert isinstance(loader, StatefulDataLoader)
    batches = list(loader)
    assert [len(b) for b in batches] == [8, 8, 8, 8] and len(loader) == 4
    assert all(isinstance(s, drt.CachedSample) for b in batches for s in b)


@pytest.mark.parametrize("context", ["spawn", "fork", "forkserver"])
def test_two_workers_divide_the_budget(dataset, context):
    loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=8,
                                         samples_per_epoch=32, num_workers=2, multiprocessing_context=context)
    batches = list(loader)
    assert [len(b) for b in batches] == [8, 8, 8, 8]


def test_sequential_split_covers_the_table_once(dataset):
    loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=5,
                                         shuffle=False, num_workers=2, multiprocessing_context="fork")
    got = [x for b in loader for x in b]
    assert sorted(got) == list(range(40))


def test_sequential_zero_workers_keeps_table_order(dataset):
    loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=7, shuffle=False)
    assert [x for b in loader for x in b] == list(range(40))


def test_budget_pads_or_drops_and_warns_on_rank_zero():
    from torch_drt.sampling.budget import batch_counts, consumer_plans, rank_budget

    def counts(samples, workers, drop_last=False, rank=0):
        plans = consumer_plans(1000, samples=samples, batch_size=32, workers=workers, world_size=3, rank=rank,
                               partition="replicate", drop_last=drop_last)
        return [p.sample_count for p in plans], batch_counts(plans, 32)

    with pytest.warns(UserWarning, match="requested 1000 global samples, effective 1002"):
        local = rank_budget(1000, world_size=3, rank=0, batch_size=32, drop_last=False)
    assert local == 334
    with pytest.warns(UserWarning, match="effective 1002"):
        assert counts(1000, 1) == ([334], [11])
    with pytest.warns(UserWarning, match="effective 960"):
        local = rank_budget(1000, world_size=3, rank=0, batch_size=32, drop_last=True)
    assert local == 320
    with pytest.warns(UserWarning, match="effective 960"):
        assert counts(1000, 1, drop_last=True) == ([320], [10])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rank_budget(1000, world_size=3, rank=1, batch_size=32, drop_last=False) == 334  # only rank 0 warns
        assert counts(1000, 2, rank=1) == ([160, 174], [5, 6])  # whole batches split, the tail on the last


def test_shuffled_draws_follow_weights_and_seed_reproduces(dataset):
    import pyarrow as pa

    table = dataset.get_metadata()
    weights = [9.0 if i == 0 else 1.0 / 39 for i in range(40)]
    dataset.update_metadata(table.set_column(table.column_names.index("weight"), "weight", pa.array(weights)))
    loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=100,
                                         samples_per_epoch=1000, seed=5, sampling="weighted")
    first = [x for b in loader for x in b]
    assert 850 <= first.count(0) <= 950
    again = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=100,
                                        samples_per_epoch=1000, seed=5, sampling="weighted")
    assert [x for b in again for x in b] == first


def test_persistent_workers_continue_and_non_persistent_repeat(dataset):
    def run(persistent):
        loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=4,
                                             samples_per_epoch=8, num_workers=1, seed=1,
                                             persistent_workers=persistent, multiprocessing_context="fork")
        return [[x for b in loader for x in b] for _ in range(2)]

    kept = run(True)
    with pytest.warns(UserWarning, match="each epoch repeats the same sample sequence"):
        fresh = run(False)
    assert kept[0] == fresh[0] and fresh[0] == fresh[1] and kept[1] != kept[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_state_dict_resumes_mid_pass_exactly(dataset, workers):
    kwargs = dict(sample_transform_fn=sample_id, collate_fn=list, batch_size=4, samples_per_epoch=32, seed=9,
                  num_workers=workers, multiprocessing_context="fork")
    reference = dataset.to_torch_dataloader(**kwargs)
    full = [b for b in reference] + [b for b in reference]
    loader = dataset.to_torch_dataloader(**kwargs)
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    state = loader.state_dict()
    resumed = dataset.to_torch_dataloader(**kwargs)
    resumed.load_state_dict(state)
    rest = list(resumed) + list(resumed)
    assert head + rest == full


def test_metadata_snapshot_is_taken_at_construction(dataset):
    loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=40, shuffle=False)
    dataset.update_metadata(dataset.get_metadata().slice(0, 2))
    assert sorted(x for b in loader for x in b) == list(range(40))


def test_transform_errors_keep_type_and_message(dataset):
    def bad(sample):
        raise KeyError(f"no {sample.sample_id}")

    with pytest.raises(KeyError, match="no "):
        next(iter(dataset.to_torch_dataloader(sample_transform_fn=bad, collate_fn=list, batch_size=2, num_workers=0)))


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"dataloader_kwargs": {"batch_size": 3}}, ValueError, "dataloader_kwargs contains reserved arguments: batch_size"),
    ({"dataloader_kwargs": {"sampler": None}}, ValueError, "dataloader_kwargs contains reserved arguments: sampler"),
    ({"shuffle": False, "seed": 3}, ValueError, "requires shuffle=True"),
    ({"worker_partition": "mirror"}, ValueError, "must be 'split', 'replicate', or None"),
    ({"batch_size": 0}, ValueError, "batch_size must be a positive integer"),
    ({"num_workers": 2, "sample_transform_fn": lambda s: s, "multiprocessing_context": "spawn"}, TypeError,
     "sample_transform_fn must be picklable"),
    ({"samples_per_epoch": 0}, ValueError, "samples_per_epoch must be a positive integer"),
])
def test_validation(dataset, kwargs, error, message):
    with pytest.raises(error, match=message):
        dataset.to_torch_dataloader(**kwargs)


def test_fetch_stage_pickles_without_live_readers(dataset):
    loader = dataset.to_torch_dataloader(collate_fn=list, batch_size=4, num_workers=0)
    next(iter(loader))
    fetcher = loader._mode.fetcher
    assert "_reader" in fetcher.__dict__  # opened by the batch above
    clone = pickle.loads(pickle.dumps(fetcher))
    assert "_reader" not in clone.__dict__
    assert len(clone.read(np.arange(4))) == 4  # reopened from paths


def test_uint8_collate(dataset):
    def to_tensor(sample):
        return torch.frombuffer(bytearray(sample.data), dtype=torch.uint8)[:4]

    batch = next(iter(dataset.to_torch_dataloader(sample_transform_fn=to_tensor, batch_size=4, shuffle=False,
                                                         num_workers=0)))
    assert batch.shape == (4, 4) and batch.dtype == torch.uint8


def id_row(sample):
    return torch.full((70_000,), sample.sample_id, dtype=torch.int32)  # 280 KB: large enough for the ring


def test_worker_batches_travel_through_shared_memory_rings_without_leaks(dataset):
    import gc
    import os

    before = {f for f in os.listdir("/dev/shm") if f.startswith("torch_drt_ring_")}
    loader = dataset.to_torch_dataloader(sample_transform_fn=id_row, collate_fn=torch.stack, batch_size=4,
                                         shuffle=False, num_workers=2, prefetch_factor=1,
                                         multiprocessing_context="fork")
    held = list(loader)  # every batch kept while later ones reuse the rings' slots
    rows = [int(row[0]) for batch in held for row in batch]
    assert all(bool((row == row[0]).all()) for batch in held for row in batch)  # no slot overwritten under us
    assert sorted(rows) == list(range(40))
    del loader, held
    gc.collect()
    after = {f for f in os.listdir("/dev/shm") if f.startswith("torch_drt_ring_")}
    assert after <= before  # the receiver unlinks each ring file once it has mapped it


def dies(sample):
    import os

    if sample.sample_id == 5:
        os._exit(7)
    return sample.sample_id


def slow(sample):
    import time

    time.sleep(2)
    return sample.sample_id


def test_a_dead_worker_is_reported_as_such(dataset):
    loader = dataset.to_torch_dataloader(sample_transform_fn=dies, collate_fn=list, batch_size=40, shuffle=False,
                                         num_workers=1, multiprocessing_context="fork")
    with pytest.raises(RuntimeError, match=r"worker process terminated abruptly \(exit code 7\)"):
        list(loader)  # a BrokenProcessPool (a RuntimeError) once sample 5 has killed two workers


def test_a_timeout_is_reported_as_such(dataset):
    loader = dataset.to_torch_dataloader(sample_transform_fn=slow, collate_fn=list, batch_size=1, shuffle=False,
                                         num_workers=1, timeout=0.5, multiprocessing_context="fork")
    with pytest.raises(TimeoutError, match=r"timeout=0\.5"):
        next(iter(loader))


def test_worker_errors_keep_type_and_message(dataset):
    loader = dataset.to_torch_dataloader(sample_transform_fn=bad_transform, collate_fn=list, batch_size=4,
                                         num_workers=1, multiprocessing_context="fork")
    with pytest.raises(KeyError, match="no sample"):
        next(iter(loader))


def bad_transform(sample):
    raise KeyError(f"no sample {sample.sample_id}")


def test_loader_defaults_must_name_a_registered_loader_style(dataset):
    dataset.loader_defaults = "nobody's"  # a subclass's name that nothing registered
    with pytest.raises(ValueError, match=r"loader_defaults=\"nobody's\" names no loader style \(known: .*'torch_drt'"):
        dataset.to_torch_dataloader(collate_fn=list)
