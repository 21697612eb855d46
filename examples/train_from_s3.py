"""Train a small model from a cache on S3: publish it, stream it through the node cache, checkpoint, resume elsewhere.

Everything runs offline against moto's S3 server on 127.0.0.1 (``pip install "moto[server]" s3fs``); with a real
bucket, drop ``endpoint_url`` from the storage options.

Run: python examples/train_from_s3.py [WORKDIR]
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

import torch_drt as drt

FEATURES = 16


class Points:
    """Two clusters of noisy points: the label says which."""

    name = "points"

    def __iter__(self) -> Iterator[drt.CacheInput]:
        rng = np.random.default_rng(0)
        for i in range(4096):
            label = i % 2
            x = rng.normal(loc=1.0 if label else -1.0, scale=1.0, size=FEATURES).astype(np.float32)
            yield drt.CacheInput(x.tobytes(), {"label": label})


def to_example(sample: drt.CachedSample) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.from_numpy(np.frombuffer(sample.data, dtype=np.float32).copy()), torch.tensor(sample.metadata["label"])


def start_s3() -> tuple[Any, dict[str, Any]]:
    """moto's S3 server on a free local port, with a bucket; returns it and the fsspec options that reach it."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request: keep the output ours

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}
    import s3fs

    s3fs.S3FileSystem(**options).mkdir("training")
    return server, options


def train(
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]], model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> float:
    loss = torch.tensor(0.0)
    for x, y in batches:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        torch.autograd.backward(loss)
        optimizer.step()
    return loss.item()


def main(workdir: Path) -> None:
    server, options = start_s3()
    try:
        rt = drt.DatasetRuntime(2)
        node_a = drt.RemoteConfig(cache_dir=str(workdir / "node-a"), cache_limit=512 << 10)  # half the data
        (result,) = rt.write_cache(Points(), "s3://training/caches",
                                   writer_config=drt.WriterConfig(show_progress=False, max_shard_bytes=32 << 10),
                                   storage_options=options, remote_config=node_a)
        print(f"published {result.path}")
        reader = drt.ReaderConfig(seed=0, shard_window=2)  # every row once per epoch, two shards at a time
        ds = rt.cached_dataset(result.path, reader_config=reader, storage_options=options, remote_config=node_a)
        loader = ds.to_torch_dataloader(sample_transform_fn=to_example, batch_size=128, num_workers=0)
        torch.manual_seed(0)
        model = torch.nn.Linear(FEATURES, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        loss = train(loader, model, optimizer)
        print(f"epoch 1 on node A: loss {loss:.3f}")
        epoch2 = iter(loader)
        train((next(epoch2) for _ in range(10)), model, optimizer)
        state = loader.state_dict()  # a checkpoint in the middle of epoch 2

        node_b = drt.RemoteConfig(cache_dir=str(workdir / "node-b"))  # another machine: an empty node cache
        elsewhere = drt.DatasetRuntime(1).cached_dataset(result.path, reader_config=reader, storage_options=options,
                                                         remote_config=node_b)
        resumed = elsewhere.to_torch_dataloader(sample_transform_fn=to_example, batch_size=128, num_workers=0)
        resumed.load_state_dict(state)
        expected = [y.tolist() for _, y in epoch2]  # what node A reads next
        got = [y.tolist() for _, y in resumed]
        print(f"resumed on node B: the same {len(got)} batches: {'yes' if got == expected else 'no'}")
        accuracy = np.mean([float((model(x).argmax(1) == y).float().mean()) for x, y in loader])
        print(f"accuracy {accuracy:.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="train_from_s3_")))
