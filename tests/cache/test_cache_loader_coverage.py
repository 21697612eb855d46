"""Sequential split reads every row exactly once per pass, for any rows, batch size, workers and ranks (issue 11).

The reference is dataset-rt 0.4.8's own partition planner (``prepare_partitions``): each consumer (rank, worker)
reads ``sample_count`` rows cyclically from the span ``[offset, offset + population_size)`` of the table (wrapping
past the end, which is dataset-rt's padding). The plans are compared field by field, and real loaders (worker
processes) are checked against the rows the reference plans say they read.
"""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from types import SimpleNamespace

import pytest
from conftest import ListSource

import torch_drt as drt
from torch_drt.sampling.budget import consumer_plans

dataset_rt_loader = pytest.importorskip("dataset_rt.integrations.loader")
from dataset_rt.integrations.loading import ReplicaIdentity  # noqa: E402

GRID = list(itertools.product([1, 5, 37, 64, 1000], [1, 7, 64], [0, 1, 2, 3], [1, 2, 3]))


def reference(rows, batch, workers, world, rank, samples=None, drop_last=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dataset_rt_loader.prepare_partitions(
            SimpleNamespace(row_count=rows), ReplicaIdentity(rank=rank, world_size=world), num_workers=workers,
            batch_size=batch, samples_per_epoch=rows if samples is None else samples, worker_partition="split",
            shuffle=False, seed=None, drop_last=drop_last)


def ours(rows, batch, workers, world, rank, samples=None, drop_last=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return consumer_plans(rows, samples=rows if samples is None else samples, batch_size=batch, workers=workers,
                              world_size=world, rank=rank, partition="split", drop_last=drop_last)


def rows_read(plan, rows):
    """The table rows a consumer reads in its first pass (its span, cyclically, wrapping past the table)."""
    return [(plan.offset + k % plan.population_size) % rows for k in range(plan.sample_count)]


@pytest.mark.parametrize(("rows", "batch", "workers", "world"), GRID)
def test_plans_match_dataset_rt_and_cover_every_row_once(rows, batch, workers, world):
    seen = Counter()
    for rank in range(world):
        theirs = reference(rows, batch, workers, world, rank)
        mine = ours(rows, batch, workers, world, rank)
        assert [(p.offset, p.population_size, p.sample_count) for p in mine] == [
            (p.offset, p.population_size, p.sample_count) for p in theirs
        ]
        for plan in mine:
            seen.update(rows_read(plan, rows))
    assert set(seen) == set(range(rows))  # every row at least once ...
    padded = -(-rows // world) * world - rows
    assert sum(seen.values()) == rows + padded  # ... and only the padding the rank budget requires repeats


@pytest.mark.parametrize(("rows", "batch", "workers", "world", "samples", "drop_last"), [
    (1000, 64, 2, 1, 300, False), (1000, 64, 3, 2, 2500, False), (100, 8, 2, 3, 50, True), (7, 3, 3, 2, 9, False),
])
def test_plans_match_dataset_rt_for_other_budgets(rows, batch, workers, world, samples, drop_last):
    for rank in range(world):
        theirs = reference(rows, batch, workers, world, rank, samples, drop_last)
        mine = ours(rows, batch, workers, world, rank, samples, drop_last)
        assert [(p.offset, p.population_size, p.sample_count) for p in mine] == [
            (p.offset, p.population_size, p.sample_count) for p in theirs
        ]


def sample_id(sample):
    return sample.sample_id


@pytest.fixture(scope="module")
def cover_cache(tmp_path_factory):
    (res,) = drt.DatasetRuntime(1).write_cache([ListSource("cover", 1000)], tmp_path_factory.mktemp("cover"),
                                                writer_config=drt.WriterConfig(show_progress=False))
    return res.path


def first_rows(cache, rows: int) -> drt.CachedDataset:
    """A dataset over the cache's first ``rows`` rows (each test its own: tables are edited)."""
    dataset = drt.DatasetRuntime(1).cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0))
    dataset.update_metadata(dataset.get_metadata().slice(0, rows))
    return dataset


@pytest.mark.parametrize(("rows", "batch", "workers"), [(1000, 64, 2), (1000, 64, 3), (37, 7, 2), (37, 5, 3)])
def test_real_loaders_read_every_row_once(cover_cache, rows, batch, workers):
    loader = first_rows(cover_cache, rows).to_torch_dataloader(
        sample_transform_fn=sample_id, collate_fn=list, batch_size=batch, shuffle=False, num_workers=workers,
        multiprocessing_context="fork")
    for _ in range(2):  # two passes: the second continues each consumer's cyclic walk over its span
        batches = list(loader)
        assert sorted(x for b in batches for x in b) == list(range(rows))
        assert sum(len(b) != batch for b in batches) <= 1  # one tail batch at most


@pytest.mark.parametrize("workers", [0, 3])
def test_two_real_ranks_read_every_row_once(tmp_path, workers):
    import json
    import socket

    import torch.multiprocessing as mp
    from dist_job import cache_cover

    (res,) = drt.DatasetRuntime(1).write_cache([ListSource("ranks", 2000)], tmp_path,
                                                writer_config=drt.WriterConfig(show_progress=False))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "cover.json"
    mp.spawn(cache_cover, args=(2, port, str(out), str(res.path), workers), nprocs=2, join=True)
    ranks = json.loads(out.read_text())
    assert sorted(ranks[0] + ranks[1]) == list(range(2000))  # 2,000 distinct rows of 2,000, none twice


def test_shuffled_split_consumers_draw_within_disjoint_spans_of_a_permuted_order(cover_cache):
    import torch_drt.compat.dataset_rt as compat  # dataset-rt's layout: a stream per loading worker, draws by weight

    dataset = compat.DatasetRuntime(1).cached_dataset([cover_cache], reader_config=compat.ReaderConfig(seed=0))
    dataset.update_metadata(dataset.get_metadata(backend="arrow").slice(0, 100))
    loader = dataset.to_torch_dataloader(collate_fn=list, batch_size=5, shuffle=True, seed=4, worker_partition="split",
                                         num_workers=3, verbose=False)
    fetcher, planner = loader._mode.fetcher, loader._mode.planner
    drawn: list[set[int]] = [set(), set(), set()]
    for epoch in range(20):  # 20 passes of draws with replacement reach nearly every row of each span
        planner.reset({"epoch": epoch, "batches_done": 0})
        for batch in planner:
            drawn[batch.worker] |= set(fetcher.rows(batch).tolist())
    assert not (drawn[0] & drawn[1] or drawn[0] & drawn[2] or drawn[1] & drawn[2])  # disjoint spans
    assert len(set().union(*drawn)) > 90
    assert max(drawn[0]) - min(drawn[0]) > 50  # spans of a keyed permutation, not runs of the table order


def test_torch_drts_shuffled_split_ranks_read_their_span_of_a_permuted_order_once_per_pass(cover_cache):
    loader = first_rows(cover_cache, 100).to_torch_dataloader(
        sample_transform_fn=sample_id, collate_fn=list, batch_size=5, shuffle=True, seed=4, worker_partition="split",
        num_workers=3, multiprocessing_context="fork")
    first, second = ([x for b in loader for x in b] for _ in range(2))
    assert sorted(first) == sorted(second) == list(range(100)) and first != second
