"""Runs in the peers venv (.bench/peers): MosaicML Streaming and LitData on the cache workloads; prints JSON.

The payloads are made exactly as bench_cache.py makes them (same seed), written with each library's own writer,
then read back sequentially (samples/s) and through each library's torch loader with batch 256 collated to a
uint8 tensor (samples/s, 0 workers).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

N, SIZE, BATCH = 20_000, 4096, 256


def payloads(n: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, SIZE, dtype=np.uint8).tobytes() for _ in range(n)]


def median_rate(fn, n, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def collate(items):
    return torch.from_numpy(np.stack([np.frombuffer(x["data"], dtype=np.uint8) for x in items]))


def streaming(data, work: Path, repeats: int) -> dict:
    from streaming import MDSWriter, StreamingDataset
    from torch.utils.data import DataLoader

    def write(k=[0]):  # noqa: B006 - a counter across calls
        k[0] += 1
        with MDSWriter(out=str(work / f"mds{k[0]}"), columns={"data": "bytes", "label": "int"}, size_limit="64mb") as w:
            for i, p in enumerate(data):
                w.write({"data": p, "label": i % 1000})

    out = {"write": median_rate(write, len(data), repeats)}
    ds = StreamingDataset(local=str(work / "mds1"), shuffle=False, batch_size=BATCH)
    out["read"] = median_rate(lambda: sum(len(ds[i]["data"]) > 0 for i in range(len(ds))), len(data), repeats)
    loader = DataLoader(ds, batch_size=BATCH, num_workers=0, collate_fn=collate)
    out["loader"] = median_rate(lambda: sum(b.shape[0] for b in loader), len(data), repeats)
    return out


_DATA: list[bytes] = []


def _item(i: int) -> dict:
    return {"data": _DATA[i], "label": i % 1000}


def litdata_bench(data, work: Path, repeats: int) -> dict:
    import litdata as ld

    _DATA[:] = data

    def write(k=[0]):  # noqa: B006
        k[0] += 1
        ld.optimize(
            fn=_item,
            inputs=list(range(len(data))),
            output_dir=str(work / f"lit{k[0]}"),
            chunk_bytes="64MB",
            num_workers=1,
            start_method="fork",
        )

    out = {"write": median_rate(write, len(data), repeats)}
    ds = ld.StreamingDataset(str(work / "lit1"))
    out["read"] = median_rate(lambda: sum(len(ds[i]["data"]) > 0 for i in range(len(ds))), len(data), repeats)
    loader = ld.StreamingDataLoader(ds, batch_size=BATCH, num_workers=0, collate_fn=collate)
    out["loader"] = median_rate(lambda: sum(b.shape[0] for b in loader), len(data), repeats)
    return out


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    data = payloads(N)
    out = {}
    for name, fn in (("mosaicml-streaming", streaming), ("litdata", litdata_bench)):
        work = Path(tempfile.mkdtemp(prefix=f"peer_{name}_"))
        try:
            out[name] = fn(data, work, repeats)
        except Exception as e:  # reported as skipped with the reason
            out[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
