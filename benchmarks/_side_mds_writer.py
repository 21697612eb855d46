"""Runs in the peers venv: MosaicML Streaming's ``MDSWriter`` on bench_cache.py's records, one write per request.

Makes the payloads as bench_cache.py does (same seed), prints ``ready``, then for each line read on stdin writes
one MDS dataset (the records and an int label, 64 MB shards) into a fresh directory and prints its wall seconds
(and the process's CPU seconds), so bench_cache_write.py can interleave it with the other writers.

    .../peers/bin/python benchmarks/_side_mds_writer.py SAMPLES
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIZE = 4096


def main() -> None:
    from streaming import MDSWriter

    n = int(sys.argv[1])
    rng = np.random.default_rng(0)
    data = [rng.integers(0, 256, SIZE, dtype=np.uint8).tobytes() for _ in range(n)]
    work = Path(tempfile.mkdtemp(prefix="side_mds_"))
    print("ready", flush=True)
    try:
        for k, _ in enumerate(sys.stdin):
            out = work / f"mds{k}"
            t0, c0 = time.perf_counter(), time.process_time()
            with MDSWriter(out=str(out), columns={"data": "bytes", "label": "int"}, size_limit="64mb") as w:
                for i, p in enumerate(data):
                    w.write({"data": p, "label": i % 1000})
            print(f"{time.perf_counter() - t0} {time.process_time() - c0}", flush=True)
            shutil.rmtree(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
