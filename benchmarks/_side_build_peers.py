"""Runs in the peers venv (.bench/peers): one timed conversion of the build benchmark's images by a peer.

    python _side_build_peers.py litdata|streaming LIST_FILE OUT_DIR WORKERS

LIST_FILE holds one image path a line. LitData: ``optimize(fn, inputs, num_workers=WORKERS)``. MosaicML Streaming:
WORKERS processes each write the MDS shards of a contiguous share of the inputs with ``MDSWriter``, then
``merge_index`` joins their indexes. Prints {"seconds": ...} as one JSON line.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _build_work import convert, label_of


def _lit_item(path: str) -> dict:
    return {"image": convert(path), "label": label_of(path)}


def litdata(paths: list[str], out: Path, workers: int) -> None:
    import litdata as ld

    ld.optimize(fn=_lit_item, inputs=paths, output_dir=str(out), chunk_bytes="64MB", num_workers=workers,
                start_method="fork")


def _mds_share(job: tuple[int, list[str], str]) -> None:
    from streaming import MDSWriter

    k, paths, out = job
    with MDSWriter(out=f"{out}/{k}", columns={"image": "bytes", "label": "int"}, size_limit="64mb") as writer:
        for path in paths:
            writer.write({"image": convert(path), "label": label_of(path)})


def streaming(paths: list[str], out: Path, workers: int) -> None:
    from streaming.base.util import merge_index

    cuts = [len(paths) * k // workers for k in range(workers + 1)]
    jobs = [(k, paths[cuts[k] : cuts[k + 1]], str(out)) for k in range(workers)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_mds_share, jobs)
    merge_index(str(out), keep_local=True)


def main() -> None:
    peer, list_file, out, workers = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    paths = Path(list_file).read_text().split()
    run = {"litdata": litdata, "streaming": streaming}[peer]
    t0 = time.perf_counter()
    run(paths, out, workers)
    print(json.dumps({"seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
