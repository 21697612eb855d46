"""The loader's default collate (torch's, with an empty batch allowed) and pinning a batch's tensors."""

from __future__ import annotations

from typing import Any


def default_collate(batch: list[Any]) -> Any:
    """torch's ``default_collate``, except that an empty batch (a padded rank) collates to ``[]``; on the calling
    thread only, without torch's intra-op threads (``torch_drt._threads``)."""
    if not batch:
        return []
    from torch.utils.data import default_collate as torch_collate

    from torch_drt import _threads

    threads = _threads.single_thread()
    try:
        return torch_collate(batch)
    finally:
        _threads.restore(threads)


def pin_batch(batch: Any) -> Any:
    """The batch with its CPU tensors in pinned memory."""
    from torch.utils.data._utils.pin_memory import pin_memory

    return pin_memory(batch)
