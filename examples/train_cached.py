"""Unpack cached training dictionaries in spawned PyTorch loading workers (dataset-rt's example, ported).

Run: python examples/train_cached.py [WORKDIR]
"""

import pickle
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import torch

import torch_drt as drt


class TrainingRecord(TypedDict):
    """Describe the Python dictionary packed into each cache payload."""

    features: list[float]
    target: int


class TrainingSamples:
    """Pack complete records while keeping targets queryable as metadata."""

    name = "training_records_v1"

    def __iter__(self) -> Iterator[drt.CacheInput]:
        """Serialize one preprocessed dictionary at a time."""
        for index in range(32):
            record = TrainingRecord(features=[index / 32, 1.0], target=index % 2)
            yield drt.CacheInput(
                data=pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL),
                metadata={"target": record["target"]},
            )


def decode(sample: drt.CachedSample) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpack and validate a record before Torch collates a bounded CPU batch."""
    record = pickle.loads(sample.data)
    if set(record) != {"features", "target"}:
        raise ValueError(f"unexpected record keys {sorted(record)}")
    features = torch.tensor(record["features"])
    target = torch.tensor(record["target"], dtype=torch.long)
    return features, target


def main(workdir: Path) -> None:
    """Construct a fixed loader topology and consume one finite sample budget."""
    runtime = drt.DatasetRuntime(num_workers=2)
    dataset = runtime.from_cache_sources(
        TrainingSamples(),
        workdir / "cache_torch",
        reader_config=drt.ReaderConfig(seed=42, shuffle=True),
        writer_config=drt.WriterConfig(show_progress=False),
    )

    loader = dataset.to_torch_dataloader(
        sample_transform_fn=decode,
        batch_size=8,
        samples_per_epoch=32,
        num_workers=2,
        native_num_workers=1,
        shuffle=True,
        seed=42,
        multiprocessing_context="spawn",
    )
    for features, targets in loader:
        print(features.shape, targets.shape)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
