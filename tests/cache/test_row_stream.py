"""Which rows a cache stream reads: CachedDataset, the cache loader's consumers and CacheSampler against a small
independent reference (the layouts written out again over the sampling primitives), for a matrix of settings:
shuffle on/off, sampling, seeds, epochs, ranks and worlds (uneven too), drop_last, weighted tables, shard windows,
workers, consumers and processes the batches are dealt to. Where two readers share a layout, their rows agree."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

import torch_drt as drt
from torch_drt.cache.loader._consumer import RowFetcher
from torch_drt.cache.loader._snapshot import export_snapshot
from torch_drt.nodes import CacheSampler
from torch_drt.nodes.stream_plan import StreamBatch
from torch_drt.sampling._counter import derive_key
from torch_drt.sampling.budget import consumer_plans
from torch_drt.sampling.locality import ShardWindowShuffle
from torch_drt.sampling.permutation import KeyedPermutation
from torch_drt.sampling.weighted import WeightedDraws

pytestmark = pytest.mark.filterwarnings("ignore:samples_per_epoch adjusted")

N = 37  # rows: uneven over 2, 3 and 4 ranks
WINDOWS = [(0, 5), (3, 40), (70, 9)]  # (start, count): an epoch's start, across an epoch's end, a later epoch


# -- the reference -----------------------------------------------------------------------------------------------


def ref_exact(n: int, seed: int, positions: np.ndarray, groups: np.ndarray | None, window: int | None) -> np.ndarray:
    """Every row once per pass of ``n`` positions: a keyed permutation per epoch, or the shard-window shuffle."""
    positions = np.asarray(positions, dtype=np.int64)
    if window is not None:
        return ShardWindowShuffle(groups, window=window, seed=seed).at(positions)
    out = np.empty(len(positions), dtype=np.int64)
    for i, p in enumerate(positions.tolist()):
        out[i] = KeyedPermutation(n, seed, p // n)(np.array([p % n]))[0]
    return out


def ref_dataset(case: dict, table: dict, start: int, count: int) -> np.ndarray:
    s = np.arange(start, start + count, dtype=np.int64)
    if not case["shuffle"]:
        return s % table["n"]
    if case["sampling"] == "weighted":
        return WeightedDraws(table["weights"], case["seed"], 0).draws(start, count)
    return ref_exact(table["n"], case["seed"], s, table["groups"], case["window"])


def ref_sampler(case: dict, table: dict, rank: int, world: int, start: int, count: int) -> np.ndarray:
    if case["shuffle"] and case["sampling"] == "weighted":  # each rank its own stream over the whole table
        return WeightedDraws(table["weights"], case["seed"], derive_key(rank, world)).draws(start, count)
    strided = np.array([k * world + rank for k in range(start, start + count)], dtype=np.int64)
    return ref_exact(table["n"], case["seed"], strided, None, None) if case["shuffle"] else strided % table["n"]


def ref_loader(case: dict, table: dict, plans, worker: int, world: int, start: int, count: int) -> np.ndarray:
    n, seed, plan = table["n"], case["seed"], plans[worker]
    s = np.arange(start, start + count, dtype=np.int64)
    span = np.array([(plan.offset + i) % n for i in range(plan.population_size)], dtype=np.int64)
    stream = plan.rank * len(plans) + plan.worker  # the consumer's number among all ranks' consumers
    if not case["shuffle"]:
        return (plan.offset + s % plan.population_size) % n
    if case["partition"] == "replicate":
        if case["sampling"] == "weighted":
            return WeightedDraws(table["weights"], seed, stream).draws(start, count)
        local = sum(p.sample_count for p in plans)
        offset = plan.rank * local + sum(p.sample_count for p in plans[:worker])
        budget, total, window = plan.sample_count, local * world, case["window"]
        passes, within = s // budget, s % budget
        if window is not None and stream % 2 == 1:
            within = budget - 1 - within
        mirrored = (passes % 2 == 1) if window is not None else np.zeros(len(s), dtype=bool)
        block = np.where(mirrored, total - offset - budget, offset)
        return ref_exact(n, seed, passes * total + block + within, table["groups"], window)
    if case["window"] is not None:  # split: the consumer's contiguous span, in its own shard-window order
        return span[ShardWindowShuffle(table["groups"][span], window=case["window"], seed=seed).at(s)]
    population = KeyedPermutation(n, seed)(span)
    if case["sampling"] == "weighted":
        return population[WeightedDraws(table["weights"][population], seed, stream).draws(start, count)]
    return population[ref_exact(len(population), derive_key(seed, stream), s, None, None)]


# -- the readers under test ----------------------------------------------------------------------------------------


def dataset_rows(ds: drt.CachedDataset, start: int, count: int) -> np.ndarray:
    """What iterating the dataset from stream position ``start`` yields (its batches' rows)."""
    state = ds.state_dict() | {"position": start, "remaining": count}
    ds.load_state_dict(state)
    rows = np.concatenate([b.rows for b in ds.iter_batches(7)])
    assert ds.state_dict()["position"] == start + count
    return rows


def sampler_rows(ds: drt.CachedDataset, case: dict, rank: int, world: int, start: int, count: int) -> np.ndarray:
    sampler = CacheSampler(ds, shuffle=case["shuffle"], sampling=case["sampling"], seed=case["seed"],
                           num_samples=10**6, rank=rank, world_size=world)
    sampler.reset(sampler.get_state() | {"position": start, "yielded": 0})
    return np.array([sampler.next() for _ in range(count)], dtype=np.int64)


def loader_rows(ds, snapshot_path, case: dict, plans, world: int, dealt_to: int, worker: int, start: int,
                count: int) -> np.ndarray:
    fetcher = RowFetcher(
        ds.cache_paths, str(snapshot_path), plans=plans, shuffle=case["shuffle"], seed=case["seed"],
        partition=case["partition"], transform=None, collate_fn=list, shard_window=case["window"], world_size=world,
        sampling=case["sampling"], dealt_to=dealt_to, reader=ds.reader,
    )
    batch = StreamBatch(0, 0, worker, 0, start, count, range(count), False)
    return fetcher.rows(batch)


# -- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    runtime = drt.DatasetRuntime(1)
    from conftest import ListSource

    root = tmp_path_factory.mktemp("rows")
    cfg = drt.WriterConfig(show_progress=False, max_shard_bytes=80)
    (result,) = runtime.write_cache(ListSource("rows", N), root / "caches", writer_config=cfg)
    out = {}
    for weighted in (False, True):
        ds = runtime.cached_dataset(result.path, reader_config=drt.ReaderConfig(seed=0))
        if weighted:
            table = ds.get_metadata()
            weights = pa.array([1.0 + (i * 7) % 5 for i in range(N)])
            ds.update_metadata(table.set_column(table.column_names.index("weight"), "weight", weights))
        active = ds.active
        snapshot = export_snapshot(active, [ds.layouts[0].cache_id], root / f"snap{int(weighted)}.arrow")
        table = {"n": len(active), "weights": np.asarray(active.weights), "snapshot": snapshot,
                 "groups": ds.reader.shard_groups(active.cache_pos, active.sample_ids)}
        out[weighted] = (runtime, result.path, table)
    return out


def _dataset(tables, case: dict) -> tuple[drt.CachedDataset, dict]:
    runtime, path, table = tables[case["sampling"] == "weighted"]
    config = drt.ReaderConfig(shuffle=case["shuffle"], seed=case["seed"], shard_window=case["window"],
                              sampling=case["sampling"])
    ds = runtime.cached_dataset(path, reader_config=config)
    if case["sampling"] == "weighted":
        meta = ds.get_metadata()
        ds.update_metadata(meta.set_column(meta.column_names.index("weight"), "weight", pa.array(table["weights"])))
    return ds, table


ORDERS = [
    {"shuffle": False, "sampling": None, "window": None},
    {"shuffle": True, "sampling": "permutation", "window": None},
    {"shuffle": True, "sampling": "weighted", "window": None},
    {"shuffle": True, "sampling": "permutation", "window": 2},
]
SEEDS = [0, 11]
CASES = [dict(order, seed=seed) for order, seed in itertools.product(ORDERS, SEEDS)]


def _name(case: dict) -> str:
    return f"shuffle={case['shuffle']}-{case['sampling']}-window={case['window']}-seed={case['seed']}"


@pytest.mark.parametrize("case", CASES, ids=_name)
def test_the_dataset_reads_the_reference_rows(tables, case):
    ds, table = _dataset(tables, case)
    for start, count in WINDOWS:
        assert dataset_rows(ds, start, count).tolist() == ref_dataset(case, table, start, count).tolist()


@pytest.mark.parametrize("case", [c for c in CASES if c["window"] is None], ids=_name)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_sampler_reads_the_reference_rows_on_every_rank(tables, case, world):
    ds, table = _dataset(tables, case)
    for rank, (start, count) in itertools.product(range(world), WINDOWS):
        got = sampler_rows(ds, case, rank, world, start, count)
        assert got.tolist() == ref_sampler(case, table, rank, world, start, count).tolist()
        if world == 1 and case["sampling"] != "weighted":  # one rank: the dataset's own stream
            assert got.tolist() == dataset_rows(ds, start, count).tolist()


LOADER_SHAPES = [  # (world, workers, drop_last, samples, batch_size, dealt_to)
    (1, 1, False, N, 4, 1),
    (1, 3, False, N, 4, 1),
    (2, 2, False, N, 5, 1),
    (3, 2, True, 50, 4, 1),
    (4, 1, False, 30, 3, 3),
    (2, 3, False, 2 * N, 6, 1),
]


@pytest.mark.parametrize("case", CASES, ids=_name)
@pytest.mark.parametrize("partition", ["replicate", "split"])
def test_the_loader_consumers_read_the_reference_rows(tables, case, partition):
    case = case | {"partition": partition}
    ds, table = _dataset(tables, case)
    for world, workers, drop_last, samples, batch_size, dealt_to in LOADER_SHAPES:
        for rank in range(world):
            plans = consumer_plans(N, samples=samples, batch_size=batch_size, workers=workers, world_size=world,
                                   rank=rank, partition=partition, drop_last=drop_last)
            if dealt_to > 1:
                plans = plans[:1]
            for worker, (start, count) in itertools.product(range(len(plans)), WINDOWS):
                if plans[worker].sample_count == 0:
                    continue
                got = loader_rows(ds, table["snapshot"], case, plans, world, dealt_to,
                                  worker if dealt_to == 1 else worker + 1, start, count)
                want = ref_loader(case, table, plans, worker, world, start, count)
                assert got.tolist() == want.tolist(), (world, workers, rank, worker, start, count)
                if world == workers == 1 and partition == "replicate":  # one consumer: the dataset's stream
                    assert got.tolist() == dataset_rows(ds, start, count).tolist()
