"""dataloader-rs's public names on torch_drt: ``from torch_drt.compat.dataloader_rs import ...`` for ``from
dataloader_rs import ...``.

``PyDataloader`` keeps dataloader-rs's semantics (plain-list batches without ``collate_fn``, an independent
iterator per ``iter()``, lengths read at ``iter()``); ``Image``, ``ImageBatch``, ``ImageCollator`` and the
``transforms`` keep its image semantics (array views in the image's own layout, HWC by default) over torch_drt's
transforms and collator, which have dataloader-rs's names, options and values; the datasets are torch_drt's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch_drt.compat.dataloader_rs.datasets import PyAsyncDataset, PyDataset

if TYPE_CHECKING:
    from torch_drt.compat.dataloader_rs import transforms
    from torch_drt.compat.dataloader_rs.dataloader import PyDataloader, PyDataloaderIter
    from torch_drt.compat.dataloader_rs.images import Image, ImageBatch, ImageCollator
    from torch_drt.sources import FileDataset, HttpDataset, ObjectStoreDataset

__all__ = [
    "FileDataset",
    "HttpDataset",
    "Image",
    "ImageBatch",
    "ImageCollator",
    "ObjectStoreDataset",
    "PyAsyncDataset",
    "PyDataloader",
    "PyDataloaderIter",
    "PyDataset",
    "transforms",
]

# these import torch, aiohttp or fsspec: loaded on first use
_LAZY = {
    "FileDataset": "torch_drt.sources",
    "HttpDataset": "torch_drt.sources",
    "Image": "torch_drt.compat.dataloader_rs.images",
    "ImageBatch": "torch_drt.compat.dataloader_rs.images",
    "ImageCollator": "torch_drt.compat.dataloader_rs.images",
    "ObjectStoreDataset": "torch_drt.sources",
    "PyDataloader": "torch_drt.compat.dataloader_rs.dataloader",
    "PyDataloaderIter": "torch_drt.compat.dataloader_rs.dataloader",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name == "transforms":
        value: Any = importlib.import_module("torch_drt.compat.dataloader_rs.transforms")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'torch_drt.compat.dataloader_rs' has no attribute {name!r}")
    globals()[name] = value
    return value
