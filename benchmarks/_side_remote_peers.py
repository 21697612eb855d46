"""Runs in the peers venv: MosaicML Streaming and LitData streaming the benchmark's data from the S3 server.

    python _side_remote_peers.py CONFIG_JSON

CONFIG_JSON: {"endpoint": moto URL (uploads), "proxy": proxy URL (every read), "bucket", "samples", "size",
"shard_bytes", "batch", "workers": [0, 2], "work": a scratch directory, "timeout": seconds per measurement}.
Each library writes the same payloads as bench_remote.py (same seed) with its own writer (once; kept in the
bucket), then for each worker count: time to
first batch and cold epoch 1 with an empty local cache, warm epoch 2 (samples/s); and, with a local cache of half
the dataset, the bytes downloaded in epoch 2 (the proxy counts them). Prints one JSON object; a library that fails
is reported with its error, and a measurement that does not finish within the timeout (Streaming can wait forever
for room in a cache smaller than its predownload) is reported as such.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
from _epochs import epochs
from _side_peers import collate


def payloads(n: int, size: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]


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


@contextlib.contextmanager
def deadline(seconds: int):
    """Raise TimeoutError in this (the main) thread after ``seconds``: a peer that hangs is reported, not waited on."""

    def expire(*_):
        raise TimeoutError(f"no result after {seconds}s (hung?)")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def measured(fn, *args, seconds: int):
    """``fn(*args)`` within ``seconds``, or ``{"error": why}``."""
    try:
        with deadline(seconds):
            return fn(*args)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:300]}


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

        out[f"w{workers}"] = measured(epochs, make, seconds=cfg["timeout"])
        half = measured(epoch2_bytes, lambda make=make: make(limit=data_bytes // 2, tag="half"), cfg["proxy"],
                        seconds=cfg["timeout"])
        out[f"w{workers}"]["epoch2_bytes"] = half if isinstance(half, dict) else half / data_bytes
    return out


_DATA: list[bytes] = []


def _item(i: int) -> dict:
    return {"data": _DATA[i], "label": i % 1000}


def litdata_run(cfg: dict, data: list[bytes], work: Path) -> dict:
    import litdata as ld
    from litdata.streaming import downloader

    # its obstore client refuses plain http (moto's endpoint; real S3 is https): allow it, nothing else changes
    downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": "true"}

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

        out[f"w{workers}"] = measured(epochs, make, seconds=cfg["timeout"])
        half = measured(epoch2_bytes, lambda make=make: make(limit=data_bytes // 2), cfg["proxy"],
                        seconds=cfg["timeout"])
        out[f"w{workers}"]["epoch2_bytes"] = half if isinstance(half, dict) else half / data_bytes
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
        out[name] = measured(fn, cfg, data, work, seconds=8 * cfg["timeout"])  # an error is reported as skipped
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
