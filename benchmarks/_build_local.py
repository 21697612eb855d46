"""The build benchmark's torch_drt row without Ray: ``torch_drt.build.build_cache_set(..., num_workers=N)`` in a
fresh process (run by bench_build.py, so that its worker processes are never forked from a Ray driver).

    python benchmarks/_build_local.py LIST_FILE OUT_ROOT PARTS WORKERS  ->  {"seconds": ..., "cpu": ...}

``cpu`` is the CPU seconds of the build in this process and its worker processes (joined at its end).
"""

from __future__ import annotations

import json
import os
import sys
import time

from bench_build import ToInput

from torch_drt import WriterConfig
from torch_drt.build import build_cache_set, split_rows


def main() -> None:
    list_file, out, parts, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with open(list_file) as f:
        rows = [{"path": line} for line in f.read().splitlines()]
    ToInput()(rows[0])  # import the conversion's modules, untimed (the workers inherit them)
    t0, c0 = time.perf_counter(), os.times()
    report = build_cache_set(split_rows(rows, ToInput(), num_parts=parts), out, "local",
                             writer_config=WriterConfig(show_progress=False), num_workers=workers)
    seconds, c1 = time.perf_counter() - t0, os.times()
    assert report.ok, report.summary()
    cpu = sum(getattr(c1, k) - getattr(c0, k) for k in ("user", "system", "children_user", "children_system"))
    print(json.dumps({"seconds": seconds, "cpu": cpu}))


if __name__ == "__main__":
    main()
