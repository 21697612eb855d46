"""Random parameters drawn with torchvision v2's calls, in its order, from the item's generator.

Each function makes the same ``torch`` calls as the torchvision v2 transform it names, with ``generator=``
``generator()``: the current item's generator inside a loader's ``transform``, torch's global generator elsewhere,
so that ``torch.manual_seed(s)`` then either transform gives the same parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from torch_drt.random import item_generator


def generator() -> torch.Generator:
    """The generator a random transform draws from (the rule of docs/augmentations.md):

    - the current item's (``torch_drt.random.item_generator()``) where one is current: in a torch_drt loader's
      ``transform``, and inside ``torch_drt.random.item_scope``;
    - otherwise torch's global generator, ``torch.default_generator``, as torchvision's transforms draw: outside
      loaders, in torch's DataLoader, and in a dataset's ``__getitem__`` under a torch_drt loader
      (``ImageFolder(root, transform=...)``), where the transform is not told which item it transforms.
    """
    try:
        return item_generator()
    except RuntimeError:  # in a torch_drt loader's batch, outside any item's scope: no item to key the draws by
        return torch.default_generator


def check_p(p: float) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{p=} must be in [0, 1]")
    return float(p)


def coin(p: float, g: torch.Generator) -> bool:
    """True with probability ``p``: torchvision's ``torch.rand(1) < p`` (it skips the transform when >= p).

    Compared as Python floats, without torch's comparison op (whose dispatch costs more than the draw), with ``p``
    rounded to float32 first, as torch rounds a Python float to compare it with a float32 tensor: the same result.
    """
    return torch.rand(1, generator=g).item() < float(np.float32(p))


def uniform(low: float, high: float, g: torch.Generator) -> float:
    """``float(torch.empty(1).uniform_(low, high).item())``."""
    return float(torch.empty(1).uniform_(low, high, generator=g).item())


def randint(high: int, g: torch.Generator, size: tuple[int, ...] = (1,)) -> int:
    """``torch.randint(0, high, size=size).item()`` (torchvision's transforms use ``(1,)`` or ``()``)."""
    return int(torch.randint(0, high, size=size, generator=g).item())


def log_ratio(ratio: Sequence[float]) -> tuple[float, float]:
    """``torch.log(torch.tensor(ratio))`` as torchvision keeps it (float32), as Python floats."""
    logs = torch.log(torch.tensor([float(r) for r in ratio]))
    return float(logs[0]), float(logs[1])


def _area_and_ratio(area: int, scale: Sequence[float], logs: tuple[float, float], g: torch.Generator):
    target = area * torch.empty(1).uniform_(scale[0], scale[1], generator=g).item()
    aspect = torch.exp(torch.empty(1).uniform_(logs[0], logs[1], generator=g)).item()
    return target, aspect


def resized_crop_box(
    height: int, width: int, scale: Sequence[float], ratio: Sequence[float], logs: tuple[float, float],
    g: torch.Generator,
) -> tuple[int, int, int, int]:
    """``RandomResizedCrop.make_params``: (top, left, height, width), ten tries then a central crop."""
    area = height * width
    for _ in range(10):
        target, aspect = _area_and_ratio(area, scale, logs, g)
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return randint(height - h + 1, g), randint(width - w + 1, g), h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def erase_box(
    channels: int, height: int, width: int, scale: Sequence[float], logs: tuple[float, float],
    random_value: bool, g: torch.Generator,
) -> tuple[int, int, int, int, torch.Tensor | None] | None:
    """``RandomErasing.make_params``: (top, left, height, width, random values or None), or None for no box."""
    area = height * width
    for _ in range(10):
        target, aspect = _area_and_ratio(area, scale, logs, g)
        h = round(math.sqrt(target * aspect))
        w = round(math.sqrt(target / aspect))
        if not (h < height and w < width):
            continue
        values = torch.empty([channels, h, w], dtype=torch.float32).normal_(generator=g) if random_value else None
        return randint(height - h + 1, g), randint(width - w + 1, g), h, w, values
    return None


def jitter_order(g: torch.Generator) -> list[int]:
    """``ColorJitter``'s ``torch.randperm(4)``."""
    return torch.randperm(4, generator=g).tolist()


def pick(p: Sequence[float], g: torch.Generator) -> int:
    """``RandomChoice``'s ``int(torch.multinomial(torch.tensor(p), 1))``."""
    return int(torch.multinomial(torch.tensor(p), 1, generator=g))
