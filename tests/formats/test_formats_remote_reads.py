"""Remote foreign datasets (MDS, LitData, WebDataset on moto S3, every request counted by a proxy): a cold epoch
fetches each shard with O(1) requests, not one per sample; a second epoch, and a new dataset on the same node,
read the node cache's copy and send no request for any shard."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest
from canon import canon
from remote_fixtures import BUCKET, moto_fixture, options, proxy_fixture, remote_config, unique  # noqa: F401
from remote_servers import upload_tree

import torch_drt as drt
from torch_drt.formats import LitDataset, MDSDataset, WebDatasetShards

pytestmark = pytest.mark.timeout(300)
FIXTURES = Path(__file__).parent / "fixtures"
PER_SHARD = 2  # requests a cold epoch may send for one shard (a range read of the first batch, the download)


def _upload(local: Path, endpoint: str) -> str:
    name = unique(local.name)
    upload_tree(local, endpoint, f"{BUCKET}/{name}")
    return name


def _tars(root: Path, shards: int = 3, per: int = 12) -> Path:
    root.mkdir(parents=True)
    for s in range(shards):
        with tarfile.open(root / f"shard-{s:06d}.tar", "w") as tar:
            for i in range(s * per, (s + 1) * per):
                for ext, data in (("cls", str(i).encode()), ("bin", bytes([i % 256]) * 300)):
                    info = tarfile.TarInfo(f"{i:05d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return root


def _shard_gets(proxy, name: str, suffix: str) -> dict[str, int]:
    return {p: n for p, n in proxy.gets.items() if p.startswith(f"/{BUCKET}/{name}/") and p.endswith(suffix)}


def _epoch(ds) -> list:
    loader = drt.StatefulDataLoader(ds, batch_size=4, shuffle=True, seed=3, collate_fn=list)
    return [s for b in loader for s in b]


@pytest.mark.parametrize("kind", ["mds", "litdata", "webdataset"])
def test_a_cold_epoch_fetches_each_shard_once_and_a_warm_one_reads_nothing(tmp_path, moto_endpoint, proxy, kind):
    if kind == "mds":
        name, suffix, make = _upload(FIXTURES / "mds" / "plain", moto_endpoint), ".mds", MDSDataset
        url = f"s3://{BUCKET}/{name}"
    elif kind == "litdata":
        name, suffix, make = _upload(FIXTURES / "litdata" / "plain", moto_endpoint), ".bin", LitDataset
        url = f"s3://{BUCKET}/{name}"
    else:
        name, suffix, make = _upload(_tars(tmp_path / "wds"), moto_endpoint), ".tar", WebDatasetShards
        url = f"s3://{BUCKET}/{name}/shard-{{000000..000002}}.tar"
    config = remote_config(tmp_path)
    local = make(f"{tmp_path}/wds/shard-{{000000..000002}}.tar" if kind == "webdataset" else FIXTURES / kind / "plain")
    proxy.reset()
    ds = make(url, storage_options=options(proxy), remote_config=config)  # (a tar is fetched to index it)
    first = _epoch(ds)
    cold = _shard_gets(proxy, name, suffix)
    assert len(cold) == ds.num_shards
    assert max(cold.values()) <= PER_SHARD, cold  # O(shards): not a request per sample
    assert len(first) == len(ds) > 2 * ds.num_shards
    proxy.reset()
    second = _epoch(ds)
    assert _shard_gets(proxy, name, suffix) == {}  # the warm epoch reads the node cache's copies
    again = make(url, storage_options=options(proxy), remote_config=config)
    third = [again[i] for i in range(len(again))]
    assert _shard_gets(proxy, name, suffix) == {}  # so does a new dataset (another process) on the node
    expected = [_canon(local[i]) for i in range(len(local))]
    assert sorted(map(repr, map(_canon, first))) == sorted(map(repr, map(_canon, second)))
    assert sorted(map(repr, map(_canon, first))) == sorted(map(repr, expected))
    assert [_canon(s) for s in third] == expected


def _canon(sample):
    if isinstance(sample, dict):
        return {k: canon(v) for k, v in sample.items() if k != "__url__"}
    return canon(sample)


def test_a_changed_object_is_fetched_again_not_served_stale(tmp_path, moto_endpoint, proxy):
    """The node cache's copy is keyed by the object's ETag: a shard rewritten in place (same size) is read anew."""
    import s3fs

    root = _tars(tmp_path / "wds", shards=1)
    name = _upload(root, moto_endpoint)
    url = f"s3://{BUCKET}/{name}/shard-000000.tar"
    config = remote_config(tmp_path)
    assert WebDatasetShards(url, storage_options=options(proxy), remote_config=config)[3]["cls"] == b"3"
    shutil.rmtree(root)
    _tars(root, shards=1)
    with tarfile.open(root / "shard-000000.tar") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(root / "shard-000000.tar", "w") as tar:
        for m, data in members:
            tar.addfile(m, io.BytesIO(data.replace(b"3", b"7") if m.name == "00003.cls" else data))
    s3fs.S3FileSystem(client_kwargs={"endpoint_url": moto_endpoint}, skip_instance_cache=True).put_file(
        str(root / "shard-000000.tar"), f"{BUCKET}/{name}/shard-000000.tar")
    assert WebDatasetShards(url, storage_options=options(proxy), remote_config=config)[3]["cls"] == b"7"
