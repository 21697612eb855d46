"""Position-based sampling: every position of an epoch is computable from (seed, epoch, offset)."""

from torch_drt.sampling._counter import derive_key, uniform
from torch_drt.sampling.weighted import WeightedDraws

__all__ = ["WeightedDraws", "derive_key", "uniform"]
