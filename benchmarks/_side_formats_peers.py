"""Each system's own writer and loader, as a subprocess of bench_formats.py (MDS, LitData and ``datasets`` in the
peers venv, webdataset in the main one).

    python _side_formats_peers.py CONFIG_JSON

CONFIG_JSON: {"do": "write" or "run", "system": "mds" | "litdata" | "webdataset" | "parquet", "endpoint" (moto,
uploads), "proxy" (every read), "bucket", "prefix", "samples", "size", "shard_bytes", "batch", "workers", "work",
"path" (the Parquet file), "shards" (WebDataset tars), "timeout"}. ``write`` writes the dataset with the system's
own writer (MDS with sha256 hashes, so torch_drt keeps its shards in the node cache) and uploads it; ``run`` times
the system's own loader, shuffled: first batch, cold epoch 1 (empty local cache), warm epoch 2. Prints one JSON
object.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _epochs import epochs


def payloads(n: int, size: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]


def collate(items) -> torch.Tensor:
    return torch.from_numpy(np.stack([np.asarray(x["data"]) if isinstance(x["data"], np.ndarray | torch.Tensor)
                                      else np.frombuffer(x["data"], dtype=np.uint8) for x in items]))


def upload(endpoint: str, bucket: str, local: Path, prefix: str) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")


_DATA: list[bytes] = []


def _item(i: int) -> dict:  # an array leaf: items of bytes and ints alone get LitData's Arrow row footer
    return {"data": np.frombuffer(_DATA[i], dtype=np.uint8), "label": i % 1000}


def write(cfg: dict, work: Path) -> dict:
    data = payloads(cfg["samples"], cfg["size"])
    if cfg["system"] == "mds":
        from streaming import MDSWriter

        with MDSWriter(out=str(work / "mds"), columns={"data": "bytes", "label": "int"},
                       size_limit=cfg["shard_bytes"], hashes=["sha256"]) as w:
            for i, p in enumerate(data):
                w.write({"data": p, "label": i % 1000})
        upload(cfg["endpoint"], cfg["bucket"], work / "mds", cfg["prefix"])
    else:
        import litdata as ld

        _DATA[:] = data
        ld.optimize(fn=_item, inputs=list(range(len(data))), output_dir=str(work / "lit"),
                    chunk_bytes=cfg["shard_bytes"], num_workers=1, start_method="fork")
        upload(cfg["endpoint"], cfg["bucket"], work / "lit", cfg["prefix"])
    return {"written": cfg["prefix"]}


def loader(cfg: dict, work: Path):
    """The system's own loader over the benchmark's dataset (a new local cache each time)."""
    system, workers, batch = cfg["system"], cfg["workers"], cfg["batch"]
    local = work / f"{system}-{workers}-{time.time_ns()}"
    if system == "mds":
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory
        from torch.utils.data import DataLoader

        clean_stale_shared_memory()
        os.environ["S3_ENDPOINT_URL"] = cfg["proxy"]
        ds = StreamingDataset(remote=f"s3://{cfg['bucket']}/{cfg['prefix']}", local=str(local), shuffle=True,
                              batch_size=batch, shuffle_seed=1)
        return DataLoader(ds, batch_size=batch, num_workers=workers, collate_fn=collate,
                          persistent_workers=workers > 0)
    if system == "litdata":
        import litdata as ld
        from litdata.streaming import downloader

        # its obstore client refuses plain http (moto's endpoint; real S3 is https): allow it, nothing else changes
        downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": "true"}

        ds = ld.StreamingDataset(f"s3://{cfg['bucket']}/{cfg['prefix']}", cache_dir=str(local), shuffle=True, seed=1,
                                 storage_options={"endpoint_url": cfg["proxy"]})
        return ld.StreamingDataLoader(ds, batch_size=batch, num_workers=workers, collate_fn=collate,
                                      persistent_workers=workers > 0)
    if system == "webdataset":  # over HTTP through the proxy (moto serves the bucket's objects), fetched by curl
        import webdataset as wds

        last = cfg["shards"] - 1
        urls = f"{cfg['proxy']}/{cfg['bucket']}/{cfg['prefix']}/shard-{{000000..{last:06d}}}.tar"
        ds = (wds.WebDataset(urls, shardshuffle=cfg["shards"], seed=1, workersplitter=wds.split_by_worker)
              .shuffle(1000, initial=1000).batched(batch, collation_fn=collate, partial=True))
        return wds.WebLoader(ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0)
    import datasets  # parquet: the datasets library's own iteration

    ds = datasets.Dataset.from_parquet(cfg["path"], cache_dir=str(local)).with_format("torch")
    return torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, collate_fn=collate,
                                       persistent_workers=workers > 0)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    work = Path(cfg["work"])
    work.mkdir(parents=True, exist_ok=True)
    try:
        out = write(cfg, work) if cfg["do"] == "write" else epochs(lambda: loader(cfg, work))
    except Exception as e:  # reported as skipped, with the reason (one line)
        out = {"error": " ".join(f"{type(e).__name__}: {e}".split())[:300]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
