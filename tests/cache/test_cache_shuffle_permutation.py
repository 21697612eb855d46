"""``shuffle=True`` is a permutation (issue 21 item 5): every row of the active table exactly once per epoch, in a new
order each epoch that the seed reproduces, in the cache loader (inline, loading processes of any start method,
reader threads), in the dataset's own iteration and in the datamodule; draws by weight with replacement are asked
for with ``sampling="weighted"``; unequal weights without it are refused; dataset-rt's compat layer keeps its
weighted draws."""

from __future__ import annotations

import pyarrow as pa
import pytest
from conftest import QUIET, ListSource

import torch_drt as drt
import torch_drt.compat.dataset_rt as compat

N = 45  # not a multiple of the batch size: the tail batch is short


def sample_id(sample) -> int:
    return sample.sample_id


@pytest.fixture
def dataset(runtime, tmp_path):
    return runtime.from_cache_sources([ListSource("p", N)], tmp_path / "caches", reader_config=drt.ReaderConfig(seed=3),
                                      writer_config=QUIET)


def epochs(loader, count: int = 2) -> list[list[int]]:
    return [[x for batch in loader for x in batch] for _ in range(count)]


def reweighted(dataset, weights: list[float]):
    table = dataset.get_metadata()
    dataset.update_metadata(table.set_column(table.column_names.index("weight"), "weight", pa.array(weights)))
    return dataset


@pytest.mark.parametrize(
    ("workers", "context", "threads"),
    [(0, None, 1), (0, None, 2), (2, "fork", 1), (2, None, 2)],  # (spawned workers: tests of the cache loader)
)
def test_the_cache_loader_reads_every_row_once_per_epoch_in_a_new_seeded_order(dataset, workers, context, threads):
    kwargs = dict(sample_transform_fn=sample_id, collate_fn=list, batch_size=4, shuffle=True, seed=11,
                  num_workers=workers, native_num_workers=threads)
    if context is not None:
        kwargs["multiprocessing_context"] = context
    first, second = epochs(dataset.to_torch_dataloader(**kwargs))
    assert sorted(first) == sorted(second) == list(range(N))
    assert first != second  # a new order per epoch
    assert epochs(dataset.to_torch_dataloader(**kwargs)) == [first, second]  # the seed reproduces both
    assert epochs(dataset.to_torch_dataloader(**{**kwargs, "seed": 12}))[0] != first


def test_the_order_does_not_depend_on_the_number_of_loading_workers(dataset):
    kwargs = dict(sample_transform_fn=sample_id, collate_fn=list, batch_size=4, seed=5, multiprocessing_context="fork")
    inline = epochs(dataset.to_torch_dataloader(num_workers=0, **kwargs))
    assert epochs(dataset.to_torch_dataloader(num_workers=3, **kwargs)) == inline


def test_a_filtered_and_duplicated_table_reads_each_of_its_rows_once(dataset):
    table = dataset.get_metadata()
    rows = [i for i in range(N) if i % 3] + [1, 2]  # rows 1 and 2 twice: each table row once, so they come twice
    dataset.update_metadata(table.take(pa.array(rows)))
    (got,) = epochs(dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=4, seed=1,
                                                num_workers=0), 1)
    assert sorted(got) == sorted(rows)


def test_samples_per_epoch_walks_one_permutation_stream(dataset):
    loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=5,
                                         samples_per_epoch=15, seed=2, num_workers=0)
    stream = [x for epoch in epochs(loader, 3) for x in epoch]  # 45 positions: one whole permutation of the table
    assert sorted(stream) == list(range(N))


def test_the_datasets_own_iteration_is_a_permutation_per_epoch(runtime, tmp_path):
    path = runtime.write_cache([ListSource("own", N)], tmp_path, writer_config=QUIET)[0].path
    dataset = runtime.cached_dataset(path, reader_config=drt.ReaderConfig(seed=4))
    first = [s.sample_id for s in dataset]
    second = [s.sample_id for batch in dataset.iter_batches(7) for s in batch.samples()]
    assert sorted(first) == sorted(second) == list(range(N)) and first != second
    again = runtime.cached_dataset(path, reader_config=drt.ReaderConfig(seed=4))
    assert [s.sample_id for s in again] == first
    state = again.state_dict()
    resumed = runtime.cached_dataset(path, reader_config=drt.ReaderConfig(seed=4))
    resumed.load_state_dict(state)
    assert [s.sample_id for s in resumed] == second


def test_weighted_sampling_draws_by_weight_with_replacement(dataset):
    weights = [9.0 if i == 0 else 1.0 / (N - 1) for i in range(N)]
    kwargs = dict(sample_transform_fn=sample_id, collate_fn=list, batch_size=50, samples_per_epoch=1000, seed=5,
                  sampling="weighted", num_workers=0)
    (equal,) = epochs(dataset.to_torch_dataloader(**{**kwargs, "samples_per_epoch": N}), 1)
    assert len(set(equal)) < N  # with replacement: a row repeats, others are missed
    (drawn,) = epochs(reweighted(dataset, weights).to_torch_dataloader(**kwargs), 1)
    assert 850 <= drawn.count(0) <= 950


def test_unequal_weights_need_weighted_sampling(dataset):
    reweighted(dataset, [2.0] + [1.0] * (N - 1))
    with pytest.raises(ValueError, match="sampling='weighted'"):
        dataset.to_torch_dataloader(collate_fn=list, shuffle=True, seed=1, num_workers=0)
    with pytest.raises(ValueError, match="sampling='weighted'"):
        next(iter(dataset))  # ReaderConfig(shuffle=True): the dataset's own permutation
    sequential = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, shuffle=False,
                                             num_workers=0)
    assert [x for b in sequential for x in b] == list(range(N))  # weights mean nothing to the sequential walk


def test_reader_config_sampling_weighted_is_the_datasets_weighted_stream(runtime, tmp_path):
    path = runtime.write_cache([ListSource("w", N)], tmp_path, writer_config=QUIET)[0].path
    dataset = runtime.cached_dataset(path, reader_config=drt.ReaderConfig(seed=4, sampling="weighted"))
    assert len({s.sample_id for s in dataset}) < N
    loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, num_workers=0)
    assert len(set(epochs(loader, 1)[0])) < N  # the loader follows the ReaderConfig
    with pytest.raises(ValueError, match="shard_window"):
        drt.ReaderConfig(seed=0, sampling="weighted", shard_window=2)
    with pytest.raises(ValueError, match="sampling"):
        dataset.to_torch_dataloader(collate_fn=list, sampling="uniform")


def test_compat_dataset_rt_keeps_weighted_draws_with_replacement(tmp_path):
    runtime = compat.DatasetRuntime(num_workers=1)
    path = runtime.write_cache([ListSource("c", N)], tmp_path, writer_config=QUIET)[0].path
    dataset = runtime.cached_dataset(path, reader_config=compat.ReaderConfig(seed=4))
    assert len({s.sample_id for s in dataset}) < N
    loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, num_workers=0, seed=3)
    assert len(set(epochs(loader, 1)[0])) < N
    assert loader.multiprocessing_context is None
    with_workers = dataset.to_torch_dataloader(collate_fn=list, num_workers=1, seed=3)
    assert with_workers.multiprocessing_context.get_start_method() == "spawn"  # dataset-rt's default


@pytest.mark.parametrize("partition", ["replicate", "split"])
def test_two_ranks_read_every_row_once_per_pass(dataset, tmp_path, partition):
    from torch_drt.cache.loader._snapshot import Snapshot, export_snapshot
    from torch_drt.cache.rows import RowStream
    from torch_drt.sampling.budget import consumer_plans

    rows = 44  # even: two ranks take 22 each, no padding
    dataset.update_metadata(dataset.get_metadata().slice(0, rows))
    passes: dict[int, list[int]] = {0: [], 1: []}
    for rank in (0, 1):  # one consumer per rank: its batches are dealt to its loading processes
        (plan,) = consumer_plans(rows, samples=rows, batch_size=5, workers=1, world_size=2, rank=rank,
                                 partition=partition, drop_last=False)
        snapshot = Snapshot(export_snapshot(dataset.active, [dataset.layouts[0].cache_id], tmp_path / f"{rank}.arrow"))
        stream = RowStream.of_consumer((plan,), 0, snapshot, order="permutation", seed=5, partition=partition,
                                       world_size=2)
        for epoch in passes:
            passes[epoch] += stream.rows(epoch * plan.sample_count, plan.sample_count).tolist()
    assert sorted(passes[0]) == sorted(passes[1]) == list(range(rows)) and passes[0] != passes[1]
