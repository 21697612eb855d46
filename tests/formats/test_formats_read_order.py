"""A remote foreign dataset read by a shuffled ``torch_drt.StatefulDataLoader`` (MDS on moto S3, every GET recorded
by the proxy): its shards download in the order the loader first reads them, not in shard order, and a batch's
shards that are not local yet download at once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from remote_fixtures import BUCKET, moto_fixture, options, proxy_fixture, remote_config, unique  # noqa: F401
from remote_servers import upload_tree

import torch_drt as drt
from torch_drt.formats import MDSDataset

pytestmark = pytest.mark.timeout(300)
SHARDS, PER = 12, 4


def _mds(root: Path) -> Path:
    """An MDS dataset of ``SHARDS`` shards of ``PER`` int samples (sample i holds i), written by hand as MDSWriter
    lays it out: ``[count][count + 1 offsets][samples]``, little-endian."""
    root.mkdir(parents=True)
    entries = []
    for s in range(SHARDS):
        samples = [int(i).to_bytes(8, "little") for i in range(s * PER, (s + 1) * PER)]
        head = 4 * (PER + 2)
        offsets = np.concatenate([[0], np.cumsum([len(x) for x in samples])]) + head
        data = np.uint32(PER).tobytes() + offsets.astype(np.uint32).tobytes() + b"".join(samples)
        name = f"shard.{s:05d}.mds"
        (root / name).write_bytes(data)
        entries.append({"format": "mds", "version": 2, "samples": PER, "column_names": ["n"],
                        "column_encodings": ["int"], "column_sizes": [8], "compression": None, "hashes": [],
                        "size_limit": 1 << 20, "raw_data": {"basename": name, "bytes": len(data), "hashes": {}},
                        "zip_data": None})
    (root / "index.json").write_text(json.dumps({"version": 2, "shards": entries}))
    return root


def _loader(ds, workers: int = 0) -> drt.StatefulDataLoader:
    return drt.StatefulDataLoader(ds, batch_size=3, shuffle=True, seed=5, num_workers=workers, collate_fn=list)


def _downloads(proxy, name: str) -> list[int]:
    """The shards of ``name`` in the order their first GET arrived."""
    seen: list[int] = []
    for _, _, path, _, _ in sorted(proxy.timeline):
        if path.startswith(f"/{BUCKET}/{name}/shard."):
            shard = int(path.rsplit(".", 2)[-2])
            if shard not in seen:
                seen.append(shard)
    return seen


def test_shards_download_in_the_order_the_shuffled_loader_reads_them(tmp_path, moto_endpoint, proxy):
    name = unique("mds-order")
    upload_tree(_mds(tmp_path / "mds"), moto_endpoint, f"{BUCKET}/{name}")
    ds = MDSDataset(f"s3://{BUCKET}/{name}", storage_options=options(proxy),
                    remote_config=remote_config(tmp_path, prefetch_shards=1))  # one download at a time: in order
    order = [i for batch in _loader(list(range(len(ds)))) for i in batch]  # the same loader over plain indices
    touched = list(dict.fromkeys(ds.locate(i)[0] for i in order))
    assert touched != sorted(touched)  # the shuffle visits shards out of shard order
    proxy.reset()
    got = [s["n"] for batch in _loader(ds) for s in batch]
    assert got == order  # the samples the loader read, in its order
    assert _downloads(proxy, name) == touched  # each shard fetched before a later-read one, none ahead of order


def test_a_batch_asks_for_its_missing_shards_at_once(tmp_path, moto_endpoint, proxy):
    """A batch over several cold shards sends their downloads together (the proxy sees them in flight at once)."""
    name = unique("mds-batch")
    upload_tree(_mds(tmp_path / "mds"), moto_endpoint, f"{BUCKET}/{name}")
    ds = MDSDataset(f"s3://{BUCKET}/{name}", storage_options=options(proxy),
                    remote_config=remote_config(tmp_path, prefetch_shards=8))
    picks = [s * PER for s in range(0, SHARDS, 2)]  # one sample of six shards
    proxy.reset()
    proxy.latency = 0.5  # a download takes long enough that one sent later would still be seen
    assert [s["n"] for s in ds.__getitems__(picks)] == picks
    assert sorted(_downloads(proxy, name)) == list(range(0, SHARDS, 2))  # those six, nothing ahead in shard order
    assert proxy.max_gets_at_once >= 3  # not one after the other
