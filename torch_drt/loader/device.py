"""Placing batches on a device: pinning is guarded for CPU-only torch, copies are non-blocking."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch


def resolve_pin_memory(pin_memory: bool) -> bool:
    """``pin_memory`` where CUDA is available; on CPU-only torch a documented no-op with a warning."""
    if not pin_memory:
        return False
    if not torch.cuda.is_available():
        warnings.warn(
            "pin_memory=True has no effect: CUDA is not available, batches stay in pageable CPU memory",
            stacklevel=3,
        )
        return False
    return True


def resolve_device(device: str | torch.device | None) -> torch.device | None:
    """Validate ``device``; a CUDA device without CUDA is a ``ValueError``."""
    if device is None:
        return None
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{device=} requested but CUDA is not available in this torch build or machine")
    return device


def move_to_device(batch: Any, device: torch.device) -> Any:
    """Copy every tensor of a (nested) batch to ``device``; non-blocking from pinned memory."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=batch.is_pinned())
    if isinstance(batch, Mapping):
        return type(batch)({k: move_to_device(v, device) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(move_to_device(v, device) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(move_to_device(v, device) for v in batch)
    return batch
