"""RandomApply and RandomChoice with torchvision v2's draws."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch_drt.transforms import _draw
from torch_drt.transforms._image import image_if_pil
from torch_drt.transforms.base import Transform, as_step, nested_repr


def _steps(transforms: Sequence[Any]) -> list[Any]:
    for t in transforms:
        if not callable(t):
            raise TypeError(f"{t!r} is not callable")
    return [as_step(t) for t in transforms]


class RandomApply(Transform):
    """torchvision v2 ``RandomApply``: all of ``transforms`` in order with probability ``p`` (one ``torch.rand(1)``
    from the item's generator), else none. A PIL image comes out as an ``Image`` either way.

    Args:
        transforms: torch_drt transforms or any callables on one image.
        p: probability of applying them.
    """

    def __init__(self, transforms: Sequence[Any], p: float = 0.5) -> None:
        self.transforms = list(transforms)
        self.p = _draw.check_p(p)
        self._steps = _steps(self.transforms)

    def apply(self, image: Any) -> Any:
        if _draw.coin(self.p, _draw.generator()):
            for step in self._steps:
                image = step(image)
        return image_if_pil(image)

    def __repr__(self) -> str:
        return nested_repr("RandomApply", self.transforms, f"p={self.p}")


class RandomChoice(Transform):
    """torchvision v2 ``RandomChoice``: one of ``transforms``, picked with probabilities ``p`` (normalised; equal
    when None) by one ``torch.multinomial`` from the item's generator. A PIL image comes out as an ``Image``.

    Args:
        transforms: torch_drt transforms or any callables on one image.
        p: a weight per transform, or None.
    """

    def __init__(self, transforms: Sequence[Any], p: Sequence[float] | None = None) -> None:
        if not transforms:
            raise ValueError("RandomChoice needs at least one transform")
        weights = [1.0] * len(transforms) if p is None else [float(x) for x in p]
        if len(weights) != len(transforms):
            raise ValueError(f"{len(weights)} weights for {len(transforms)} transforms")
        if min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(f"weights {weights} must be >= 0 with a positive sum")
        self.transforms = list(transforms)
        self.p = [w / sum(weights) for w in weights]
        self._steps = _steps(self.transforms)

    def apply(self, image: Any) -> Any:
        return image_if_pil(self._steps[_draw.pick(self.p, _draw.generator())](image))

    def __repr__(self) -> str:
        return nested_repr("RandomChoice", self.transforms, f"p={self.p}")
