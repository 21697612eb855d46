"""A real distributed job (gloo) used by test_loader_distributed.py; each rank runs ``run``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch.distributed as dist

from torch_drt import StatefulDataLoader

N = 50



def write_gathered(out: str, value: object, rank: int, world_size: int) -> None:
    """Gather every rank's ``value``; rank 0 writes the list to ``out`` as JSON."""
    gathered: list[object] = [None] * world_size
    dist.all_gather_object(gathered, value)
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))

def run(rank: int, world_size: int, port: int, out: str, stop_after: int | None, resume: str | None) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        loader = StatefulDataLoader(list(range(N)), batch_size=3, shuffle=True, seed=7, num_workers=2, collate_fn=list,
                                    worker_method="thread", split_by_rank=True)
        assert (loader.rank, loader.world_size) == (rank, world_size)  # taken from the process group
        if resume:
            loader.load_state_dict(json.loads(Path(resume).read_text()))
        seen, steps = [], 0
        for batch in loader:
            seen += batch
            steps += 1
            dist.barrier()  # a collective every step: unequal step counts would hang here
            if stop_after is not None and steps == stop_after:
                break
        write_gathered(out, {"seen": seen, "steps": steps, "state": loader.state_dict()}, rank, world_size)
    finally:
        dist.destroy_process_group()


def cache_budget(rank: int, world_size: int, port: int, out: str, cache: str, drop_last: bool) -> None:
    """Each rank builds the cache loader from the process group and reports its batch sizes."""
    import warnings

    import torch_drt as drt

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        dataset = drt.DatasetRuntime(1).cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = dataset.to_torch_dataloader(collate_fn=len, batch_size=32, samples_per_epoch=1000,
                                                 seed="random", drop_last=drop_last)
        sizes = list(loader)
        warned = [str(w.message) for w in caught if "samples_per_epoch adjusted" in str(w.message)]
        write_gathered(out, {"sizes": sizes, "warned": warned, "seed": loader.seed}, rank, world_size)
    finally:
        dist.destroy_process_group()


def cache_cover(rank: int, world_size: int, port: int, out: str, cache: str, workers: int) -> None:
    """Each rank reads one sequential pass of the cache loader and reports the sample ids it saw."""
    import torch_drt as drt

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        dataset = drt.DatasetRuntime(1).cached_dataset([cache], reader_config=drt.ReaderConfig(seed=0))
        loader = dataset.to_torch_dataloader(sample_transform_fn=sample_id, collate_fn=list, batch_size=64,
                                             shuffle=False, num_workers=workers, multiprocessing_context="fork")
        seen = [x for batch in loader for x in batch]
        write_gathered(out, seen, rank, world_size)
    finally:
        dist.destroy_process_group()


def sample_id(sample) -> int:
    return sample.sample_id


def prefetch_window(rank: int, world_size: int, port: int, out: str, url: str, endpoint: str, node_dir: str,
                    limit: int, path: str) -> None:
    """Each rank (``LOCAL_WORLD_SIZE`` ranks on this node) starts reading a remote cache through one node cache by
    ``path`` (``"sampler"``: ``CacheSampler``; ``"dataset"``: iterating the ``CachedDataset``; ``"loader"``: the
    cache loader with no loading processes; ``"formats"``: ``torch_drt.StatefulDataLoader`` over an MDS dataset at
    ``url``, which plans its reads), waits until its prefetcher has nothing more to do and reports its
    prefetch bound and its window (the planned shards within it, and whether each is local). Rows are read in
    order, two shards' rows per batch (the plan fills four batches ahead at a start)."""
    import time

    import torch_drt as drt
    from torch_drt.cache.loader import CacheSampler

    loader = None

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(world_size))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        config = drt.RemoteConfig(cache_dir=node_dir, cache_limit=limit, backoff=0.01, max_backoff=0.05)
        storage = {"client_kwargs": {"endpoint_url": endpoint}, "skip_instance_cache": True}
        if path == "formats":
            from torch_drt.formats import MDSDataset

            mds = MDSDataset(url, storage_options=storage, remote_config=config)
            loader = drt.StatefulDataLoader(mds, batch_size=MDS_ROWS, shuffle=False, collate_fn=len)
            reading = (loader, iter(loader))
            next(reading[1])
            prefetcher = mds._remote_file(0).backend.prefetcher
        else:
            ds = drt.DatasetRuntime(1).cached_dataset(
                url, reader_config=drt.ReaderConfig(seed=0, shuffle=False, prefetch_size=128), remote_config=config,
                storage_options=storage)
            prefetcher = ds.layouts[0].backend.prefetcher
        if path == "sampler":
            reading = CacheSampler(ds, shuffle=False)
            reading.reset()
            reading.next()
        elif path == "dataset":
            reading = iter(ds)
            next(reading)
        elif path == "loader":
            loader = ds.to_torch_dataloader(collate_fn=len, batch_size=128, shuffle=False, num_workers=0)
            reading = (loader, iter(loader))
            next(reading[1])
        # ``reading`` stays referenced until the report: a loader collected before it (in a reference cycle, at a
        # garbage collection's whim) withdraws its plan, and the withdrawn plan's bound is not the share
        deadline = time.time() + 60
        while time.time() < deadline:
            with prefetcher._cond:
                if not prefetcher._running and not prefetcher._urgent and prefetcher._next() is None:
                    break
            time.sleep(0.02)
        with prefetcher._cond:
            window = prefetcher._ahead_of_plan()
            report = {"bound": prefetcher._bound, "window": [f.rel for f in window],
                      "local": [f.present() for f in window]}
        write_gathered(out, report, rank, world_size)
        del reading, loader
    finally:
        dist.destroy_process_group()


MDS_ROWS = 512  # int samples per shard of ``write_mds``


def write_mds(root: Path, shards: int) -> None:
    """An MDS dataset of ``shards`` shards of ``MDS_ROWS`` int samples (sample i holds i), as MDSWriter lays it out:
    ``[count][count + 1 offsets][samples]``, little-endian."""
    import struct

    root.mkdir(parents=True)
    entries = []
    for s in range(shards):
        head = 4 * (MDS_ROWS + 2)
        offsets = [head + 8 * i for i in range(MDS_ROWS + 1)]
        samples = b"".join(i.to_bytes(8, "little") for i in range(s * MDS_ROWS, (s + 1) * MDS_ROWS))
        data = struct.pack(f"<{MDS_ROWS + 2}I", MDS_ROWS, *offsets) + samples
        name = f"shard.{s:05d}.mds"
        (root / name).write_bytes(data)
        entries.append({"format": "mds", "version": 2, "samples": MDS_ROWS, "column_names": ["n"],
                        "column_encodings": ["int"], "column_sizes": [8], "compression": None, "hashes": [],
                        "size_limit": 1 << 20, "raw_data": {"basename": name, "bytes": len(data), "hashes": {}},
                        "zip_data": None})
    (root / "index.json").write_text(json.dumps({"version": 2, "shards": entries}))


def unseeded(rank: int, world_size: int, port: int, out: str) -> None:
    """Each rank seeds torch differently (a common pattern) and builds shuffled, split loaders without ``seed=``:
    over the process group, and with the group's rank and world size given explicitly."""
    import torch

    torch.manual_seed(100 + rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        loaders = {
            "group": StatefulDataLoader(list(range(N)), batch_size=3, shuffle=True, collate_fn=list,
                                        split_by_rank=True),
            "explicit": StatefulDataLoader(list(range(N)), batch_size=3, shuffle=True, collate_fn=list, rank=rank,
                                           world_size=world_size),
        }
        report = {}
        for name, loader in loaders.items():
            seen = [x for batch in loader for x in batch]
            report[name] = {"seen": seen, "seed": loader.seed, "next": [x for batch in loader for x in batch]}
        write_gathered(out, report, rank, world_size)
    finally:
        dist.destroy_process_group()
