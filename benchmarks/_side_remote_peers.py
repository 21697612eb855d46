"""Runs in the peers venv: MosaicML Streaming and LitData streaming the benchmark's data from the S3 server.

    python _side_remote_peers.py CONFIG_JSON

CONFIG_JSON: {"endpoint": moto URL (uploads), "proxy": proxy URL (every read), "bucket", "samples", "size",
"shard_bytes", "batch", "workers": [0, 2], "work": a scratch directory}. Each library writes the same payloads as
bench_remote.py (same seed) with its own writer (once; kept in the bucket), then for each worker count: time to
first batch and cold epoch 1 with an empty local cache, warm epoch 2 (samples/s); and, with a local cache of half
the dataset, the bytes downloaded in epoch 2 (the proxy counts them). Prints one JSON object; a library that fails
is reported with its error.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import torch


def payloads(n: int, size: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]


def collate(items):
    return torch.from_numpy(np.stack([np.frombuffer(x["data"], dtype=np.uint8) for x in items]))


def proxy_call(proxy: str, what: str) -> dict:
    method = "POST" if what == "__reset" else "GET"
    with urllib.request.urlopen(urllib.request.Request(f"{proxy}/{what}", method=method), timeout=30) as r:
        return json.loads(r.read())


def s3(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint)


def upload(endpoint: str, bucket: str, local: Path, prefix: str) -> int:
    client, total = s3(endpoint), 0
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")
        total += path.stat().st_size if path.suffix in (".mds", ".bin") else 0
    return total


def exists(endpoint: str, bucket: str, key: str) -> bool:
    try:
        s3(endpoint).head_object(Bucket=bucket, Key=key)
        return True
    except Exception:
        return False


def epochs(make_loader, proxy: str, samples: int) -> dict:
    """TTFB and epoch 1 (cold), epoch 2 (warm): samples/s."""
    t0 = time.perf_counter()
    loader = make_loader()
    it = iter(loader)
    first = next(it)
    ttfb = time.perf_counter() - t0
    count = first.shape[0] + sum(b.shape[0] for b in it)
    epoch1 = time.perf_counter() - t0
    t1 = time.perf_counter()
    count2 = sum(b.shape[0] for b in loader)
    epoch2 = time.perf_counter() - t1
    return {"ttfb": ttfb, "epoch1": count / epoch1, "epoch2": count2 / epoch2, "count": count}


def epoch2_bytes(make_loader, proxy: str) -> int:
    loader = make_loader()
    sum(b.shape[0] for b in loader)
    proxy_call(proxy, "__reset")
    sum(b.shape[0] for b in loader)
    return proxy_call(proxy, "__stats")["bytes_out"]


def streaming(cfg: dict, data: list[bytes], work: Path) -> dict:
    from streaming import MDSWriter, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader

    os.environ["S3_ENDPOINT_URL"] = cfg["proxy"]
    bucket, prefix = cfg["bucket"], f"mds-{cfg['samples']}-{cfg['size']}-{cfg['shard_bytes']}"
    if not exists(cfg["endpoint"], bucket, f"{prefix}/index.json"):
        with MDSWriter(out=str(work / "mds"), columns={"data": "bytes", "label": "int"},
                       size_limit=cfg["shard_bytes"]) as w:
            for i, p in enumerate(data):
                w.write({"data": p, "label": i % 1000})
        upload(cfg["endpoint"], bucket, work / "mds", prefix)
    index = json.loads(s3(cfg["endpoint"]).get_object(Bucket=bucket, Key=f"{prefix}/index.json")["Body"].read())
    data_bytes = sum(s["raw_data"]["bytes"] for s in index["shards"])
    out: dict = {"dataset_bytes": data_bytes}
    for workers in cfg["workers"]:
        def make(limit=None, workers=workers, tag=f"run{workers}"):
            clean_stale_shared_memory()
            local = work / f"mds-local-{tag}-{time.time_ns()}"
            ds = StreamingDataset(remote=f"s3://{bucket}/{prefix}", local=str(local), shuffle=True,
                                  batch_size=cfg["batch"], shuffle_seed=1, cache_limit=limit)
            return DataLoader(ds, batch_size=cfg["batch"], num_workers=workers, collate_fn=collate,
                              persistent_workers=workers > 0)

        out[f"w{workers}"] = epochs(make, cfg["proxy"], cfg["samples"])
        out[f"w{workers}"]["epoch2_bytes"] = epoch2_bytes(lambda make=make: make(limit=data_bytes // 2, tag="half"),
                                                          cfg["proxy"]) / data_bytes
    return out


_DATA: list[bytes] = []


def _item(i: int) -> dict:
    return {"data": _DATA[i], "label": i % 1000}


def litdata_run(cfg: dict, data: list[bytes], work: Path) -> dict:
    import litdata as ld

    _DATA[:] = data
    bucket, prefix = cfg["bucket"], f"lit-{cfg['samples']}-{cfg['size']}-{cfg['shard_bytes']}"
    if not exists(cfg["endpoint"], bucket, f"{prefix}/index.json"):
        ld.optimize(fn=_item, inputs=list(range(len(data))), output_dir=str(work / "lit"),
                    chunk_bytes=cfg["shard_bytes"], num_workers=1, start_method="fork")
        upload(cfg["endpoint"], bucket, work / "lit", prefix)
    index = json.loads(s3(cfg["endpoint"]).get_object(Bucket=bucket, Key=f"{prefix}/index.json")["Body"].read())
    data_bytes = sum(c["chunk_bytes"] for c in index["chunks"])
    out: dict = {"dataset_bytes": data_bytes}
    options = {"endpoint_url": cfg["proxy"]}
    for workers in cfg["workers"]:
        def make(limit=None, workers=workers):
            cache = work / f"lit-cache-{workers}-{time.time_ns()}"
            ds = ld.StreamingDataset(f"s3://{bucket}/{prefix}", cache_dir=str(cache), shuffle=True, seed=1,
                                     storage_options=options, max_cache_size=limit or "100GB")
            return ld.StreamingDataLoader(ds, batch_size=cfg["batch"], num_workers=workers, collate_fn=collate)

        out[f"w{workers}"] = epochs(make, cfg["proxy"], cfg["samples"])
        out[f"w{workers}"]["epoch2_bytes"] = epoch2_bytes(lambda make=make: make(limit=data_bytes // 2),
                                                          cfg["proxy"]) / data_bytes
    return out


def main() -> None:
    cfg = json.loads(sys.argv[1])
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    data = payloads(cfg["samples"], cfg["size"])
    out = {}
    for name, fn in (("mosaicml-streaming", streaming), ("litdata", litdata_run)):
        work = Path(cfg["work"]) / name
        work.mkdir(parents=True, exist_ok=True)
        try:
            out[name] = fn(cfg, data, work)
        except Exception as e:  # reported as skipped with the reason
            out[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
