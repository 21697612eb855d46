"""The map-style dataset the autotune tests load: item ``i`` is a row of ``width`` int64 equal to ``i``."""

from __future__ import annotations

import torch


class Rows:
    def __init__(self, n: int, width: int = 8) -> None:
        self.n = n
        self.width = width

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((self.width,), i, dtype=torch.int64)
