"""Rank and world size: explicit, else the initialised torch.distributed group, else 0 and 1."""

from __future__ import annotations

__all__ = ["topology"]


def topology(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Resolve ``(rank, world_size)`` and validate them."""
    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    world_size = (dist.get_world_size() if initialised else 1) if world_size is None else world_size
    rank = (dist.get_rank() if initialised else 0) if rank is None else rank
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
    return rank, world_size
