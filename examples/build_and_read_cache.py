"""Build a cache from a Python source, reuse it, steer it through the metadata table and read it back.

Run: python examples/build_and_read_cache.py [WORKDIR]
"""

from __future__ import annotations

import pickle
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow.compute as pc

import torch_drt as drt


class TrainingRecords:
    """Pack complete records while keeping targets queryable as metadata."""

    name = "training_records_v1"

    def __iter__(self) -> Iterator[drt.CacheInput]:
        for index in range(32):
            target = index % 2
            record = {"features": [index / 32, 1.0], "target": target}
            yield drt.CacheInput(
                data=pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL),
                metadata={"target": target, "group": "even" if index % 4 < 2 else "odd"},
            )


def main(workdir: Path) -> None:
    runtime = drt.DatasetRuntime(num_workers=2)
    dataset = runtime.from_cache_sources(
        TrainingRecords(),
        workdir / "cache",
        reader_config=drt.ReaderConfig(seed=42, shuffle=False),
        writer_config=drt.WriterConfig(show_progress=False),
    )

    table = dataset.get_metadata()
    print("columns:", table.column_names, "rows:", table.num_rows)
    # Keep only target 1, without rewriting the cache.
    dataset.update_metadata(table.filter(pc.equal(table.column("target"), 1)))
    targets = [pickle.loads(sample.data)["target"] for sample in dataset]
    print("after filter:", len(targets), "samples, targets", sorted(set(targets)))
    assert targets == [1] * 16


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
