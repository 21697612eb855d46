"""Transform and Compose."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Compose", "Transform"]


class Transform:
    """A callable on one image (or, for ``Decode``, on encoded bytes). Subclasses implement ``__call__``."""

    def __call__(self, image: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


class Compose(Transform):
    """Apply ``transforms`` in order. The loader accepts a Compose directly as its ``transform``.

    Args:
        transforms: the transforms.
    """

    def __init__(self, transforms: Sequence[Transform]) -> None:
        for t in transforms:
            if not callable(t):
                raise TypeError(f"{t!r} is not callable")
        self.transforms = list(transforms)
        self._steps = _fuse(self.transforms)

    def __call__(self, image: Any) -> Any:
        for t in self._steps:
            image = t(image)
        return image


def _fuse(transforms: list[Any]) -> list[Any]:
    """Run [PadTo,] ToFloat, Normalize, ToChw (in either order of the last two) as one step with the same values."""
    from torch_drt.transforms.dtype import FloatNormalizeChw, Normalize, ToChw, ToFloat
    from torch_drt.transforms.geometry import PadTo

    steps, i = [], 0
    while i < len(transforms):
        pad = transforms[i] if type(transforms[i]) is PadTo else None
        start = i + (pad is not None)
        window = transforms[start : start + 3]
        kinds = [type(t) for t in window]
        if kinds in ([ToFloat, Normalize, ToChw], [ToFloat, ToChw, Normalize]):
            normalize = window[1] if kinds[1] is Normalize else window[2]
            steps.append(FloatNormalizeChw(window[0], normalize, pad))
            i = start + 3
        else:
            steps.append(transforms[i])
            i += 1
    return steps
