"""Runs under the Python 3.13 side venv: guideloom's loader on the token-stream workload; prints JSON."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    import guideloom as gl

    seq, batch = 2048, 8
    work = Path(tempfile.mkdtemp(prefix="guideloom_"))
    try:
        dtype = np.dtype([("tok", np.int32)])
        storage = gl.StreamStorage(work, gl.StreamNumpyFormat(dtype))
        tokens = np.arange(32 << 20, dtype=np.int32)
        with storage.sync_writer() as writer:
            for shard in range(4):
                part = tokens[shard * (8 << 20) : (shard + 1) * (8 << 20)]
                writer.append(shard, {"tok": part})
        n = tokens.size // seq

        def collate(items):
            return np.stack([item["tok"] for item in items])

        out = {}
        for name, shuffle in (("sequential", False), ("shuffled", True)):
            times = []
            for _ in range(repeats):
                loader = gl.StatefulDataLoader.from_storage(
                    storage,
                    collate,
                    sequence_length=seq,
                    local_batch_size=batch,
                    num_workers=2,
                    shuffle=shuffle,
                    shuffle_seed=0 if shuffle else None,
                )
                t0 = time.perf_counter()
                with loader:
                    for _ in loader:
                        pass
                times.append(time.perf_counter() - t0)
            out[name] = n // batch * batch * seq / statistics.median(times)
        print(json.dumps(out))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
