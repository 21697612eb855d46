"""guideloom's ``from_storage`` keywords mapped onto torch_drt's loader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from torch_drt.storage.document import DocumentStorage
from torch_drt.storage.token_stream import TokenStreamStorage
from torch_drt.storage.token_stream_dataset import TokenStreamDataset


def loader_kwargs_from_storage(
    storage: Any,
    *,
    sequence_length: int | None = None,
    device: Any = None,
    local_batch_size: int = 1,
    rank: int = 0,
    world_size: int = 1,
    num_workers: int = 0,
    parallel_method: str = "thread",
    shuffle: bool = False,
    shuffle_seed: int | None = None,
    pin_memory: bool = False,
    drop_last: bool = True,
    prefetch: int = 0,
    packing: str | Mapping[str, Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Return ``(dataset, StatefulDataLoader keyword arguments)`` for a storage and guideloom's keywords.

    Stream storage needs ``sequence_length`` (a ``ValueError`` without it); document storage refuses it (a
    ``TypeError``). A storage with fewer samples than one global batch (``local_batch_size * world_size``) is a
    ``ValueError`` whatever ``drop_last`` (guideloom's ``open()`` check). ``shuffle_seed`` does not change the
    order when ``shuffle`` is False but is the loader's seed and is recorded in ``state_dict()`` (as in
    guideloom); ``prefetch`` batches beyond the workers become ``prefetch_depth`` (at least 1); ``drop_last``
    defaults to True as in guideloom. ``device=None`` is the current CUDA device when CUDA is available, else
    the CPU (guideloom's default); ``pin_memory`` needs a CUDA device (a ``ValueError`` otherwise).

    ``packing`` (torch_drt's addition) yields ``torch_drt.lm.PackedSequence`` items of ``sequence_length``
    tokens: a method name (``"concat"``, ``"first_fit"``, ``"best_fit"``) or a mapping of ``PackerNode``
    keywords. A document storage becomes a ``PackerNode`` that shuffles (by ``shuffle_seed``, drawn at random
    when None) and takes this rank's share itself; a token stream becomes ``PackedWindows`` (concatenate and
    chunk; the method does not matter), shuffled and split by the loader.

    Raises:
        TypeError: for a ``sequence_length`` on a document storage, or an unknown storage type.
        ValueError: for a stream storage without ``sequence_length``, too few samples for one global batch, or
            ``pin_memory`` without a CUDA device.
    """
    device = default_device() if device is None else torch.device(device)
    if pin_memory and device.type != "cuda":
        raise ValueError(f"pin_memory is set, but the device {device} is not CUDA")
    if packing is not None:
        from torch_drt.lm.packer_node import PackerNode
        from torch_drt.lm.window_dataset import PackedWindows

        if sequence_length is None:
            raise TypeError("packing needs sequence_length")
        options: dict[str, Any] = {"method": packing} if isinstance(packing, str) else dict(packing)
        if isinstance(storage, TokenStreamStorage):  # windows are addressable: map-style, the loader shuffles
            if set(options) - {"method", "pad_id"}:
                raise TypeError(f"a token stream is cut into windows: {sorted(set(options) - {'method', 'pad_id'})}"
                                " do not apply")
            dataset: Any = PackedWindows(storage, sequence_length, options.get("pad_id", 0))
        else:
            seed = 0  # no shuffle
            if shuffle and shuffle_seed is not None:
                seed = shuffle_seed
            elif shuffle:  # no seed given: one drawn at random
                seed = int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> 1)
            dataset = PackerNode(storage, sequence_length, shuffle=shuffle, seed=seed,
                                 rank=rank, world_size=world_size, **options)
            shuffle = False  # the node shuffles
    elif isinstance(storage, TokenStreamStorage):
        if sequence_length is None:
            raise ValueError("sequence_length must be specified for a stream storage")
        dataset = TokenStreamDataset(storage, sequence_length)
    elif isinstance(storage, DocumentStorage):
        if sequence_length is not None:
            raise TypeError("sequence_length is only for token stream storage, not document storage")
        dataset = storage
    else:
        raise TypeError(f"expected a TokenStreamStorage or DocumentStorage, got {type(storage).__name__}")
    if packing is None:
        check_one_global_batch(len(dataset), local_batch_size, world_size)
    return dataset, {
        "batch_size": local_batch_size,
        "rank": rank,
        "world_size": world_size,
        "num_workers": num_workers,
        "worker_method": parallel_method,
        "shuffle": shuffle,
        "seed": shuffle_seed,
        "pin_memory": pin_memory,
        "drop_last": drop_last,
        "prefetch_depth": max(1, prefetch),
        "device": None if device.type == "cpu" else device,  # CPU batches are not copied (nor in guideloom)
    }


def default_device() -> torch.device:
    """guideloom's default device: the current CUDA device when CUDA is available, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def check_one_global_batch(size: int, local_batch_size: Any, world_size: Any) -> None:
    """guideloom's ``open()`` check: fewer samples than ``local_batch_size * world_size`` is a ``ValueError``
    (whatever ``drop_last``); other faults of the two are left to the loader's own checks."""
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (local_batch_size, world_size)):
        return
    if size < local_batch_size * world_size:
        raise ValueError(
            f"The dataset has fewer elements ({size}) than the global batch-size ({local_batch_size * world_size})"
        )
