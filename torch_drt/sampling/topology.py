"""Rank and world size, looked up in one place: explicit values, else the initialised process group, else 0 and 1."""

from __future__ import annotations

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


class RankSplit:
    """Whether a loader splits its data by rank, and over which topology (resolved when asked, not when built).

    torch's ``DataLoader`` never splits by rank (a ``DistributedSampler`` does); a torch_drt loader does so only
    when asked: with ``split_by_rank=True`` (rank and world size from the process group, looked up at each
    ``resolve()``, so a loader built before ``init_process_group`` splits once the group exists) or with an
    explicit ``rank`` / ``world_size`` (which win over the group's).

    Args:
        split_by_rank: True: split over the process group; False: never; None: only when ``rank`` or
            ``world_size`` is given.
        rank: this rank, or None (the group's).
        world_size: the number of ranks, or None (the group's).

    Raises:
        ValueError: on values of the wrong type or range, or ``split_by_rank=False`` with a rank or world size.
    """

    def __init__(self, split_by_rank: bool | None = None, rank: int | None = None, world_size: int | None = None):
        if split_by_rank is not None and not isinstance(split_by_rank, bool):
            raise ValueError(f"{split_by_rank=} must be a bool or None")
        given = rank is not None or world_size is not None
        if split_by_rank is False and given:
            raise ValueError(f"split_by_rank=False contradicts {rank=}, {world_size=}: give one or the other")
        if given:  # checked up front; a missing one is the group's, at resolve()
            resolve_topology(0 if rank is None else rank, world_size if world_size is not None else MAX_WORLD_SIZE)
            if rank is not None and world_size is not None:
                resolve_topology(rank, world_size)
        self.enabled = bool(split_by_rank) or given
        self.rank, self.world_size = (0 if rank is None and world_size == 1 else rank), world_size

    def resolve(self) -> tuple[int, int]:
        """``(rank, world_size)`` now: ``(0, 1)`` when not splitting, else ``resolve_topology``'s answer."""
        if not self.enabled:
            return 0, 1
        return resolve_topology(self.rank, self.world_size)

    def __repr__(self) -> str:
        return f"RankSplit(enabled={self.enabled}, rank={self.rank}, world_size={self.world_size})"


def rank_zeros(value: int, topology: tuple[int, int]) -> int | None:
    """Rank zero's ``value``, on every rank of ``topology`` where it is the process group's (a broadcast: each of
    its ranks must call this at the same point); ``value`` itself for one rank; None when the group is another
    (or there is none): the ranks cannot be asked."""
    if topology[1] == 1:
        return value
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or (dist.get_rank(), dist.get_world_size()) != topology:
        return None
    values = [value]
    dist.broadcast_object_list(values, src=0)
    return int(values[0])
