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

    def __call__(self, image: Any) -> Any:
        for t in self.transforms:
            image = t(image)
        return image
