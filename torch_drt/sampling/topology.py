"""Rank and world size, looked up in one place: explicit values, else the initialised process group, else 0 and 1."""

from __future__ import annotations

__all__ = ["resolve_topology"]

MAX_WORLD_SIZE = 1 << 32


def resolve_topology(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Return ``(rank, world_size)``: the given values, else ``torch.distributed``'s default group, else 0 and 1.

    Raises:
        ValueError: when a value is not an int, ``world_size < 1`` or ``rank`` is outside ``[0, world_size)``.
    """
    if rank is None or world_size is None:
        import torch.distributed as dist

        initialised = dist.is_available() and dist.is_initialized()
        if world_size is None:
            world_size = dist.get_world_size() if initialised else 1
        if rank is None:
            rank = dist.get_rank() if initialised else 0
    for name, value in (("rank", rank), ("world_size", world_size)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{name}={value!r} must be an int")
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size={world_size} must be in [1, {MAX_WORLD_SIZE}]")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
    return rank, world_size
