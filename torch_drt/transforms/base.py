"""Transform and Compose."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from torch_drt import _threads
from torch_drt.transforms._image import image_if_pil


def _is_index(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


class Transform:
    """A callable on one image (``Decode``: on encoded bytes). Subclasses implement ``apply(image)``.

    A transform takes the forms a loader, a dataset and torchvision give it:

    - ``t(image)``: an ``Image``, a ``tv_tensors.Image`` or (C, H, W) tensor, or a PIL image (taken as torchvision
      v2's ``ToImage`` gives it: the result is an ``Image``);
    - ``t((image, target, ...))`` and ``t(image, target, ...)`` (torchvision v2's form, as ``v2.Compose`` calls it
      with several inputs): the image is transformed, the rest passes through unchanged, a tuple is returned;
    - ``t(index, item)`` with an int ``index``: the loader's ``transform(index, item)`` hook; the index is not used.

    A call runs its torch ops on the calling thread only, without torch's intra-op threads, and leaves other
    threads and torch's settings as they were (see ``torch_drt._threads``).
    """

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1:
            item = args[0]
        elif len(args) == 2 and _is_index(args[0]):  # transform(index, item)
            item = args[1]
        elif args:  # torchvision's transform(image, target, ...): one sample of several inputs
            item = args
        else:
            raise TypeError(f"{type(self).__name__} takes (item), (image, target, ...) or (index, item), got none")
        threads = _threads.single_thread()
        try:
            if type(item) is tuple and item:
                return (self.apply(item[0]), *item[1:])
            return self.apply(item)
        finally:
            _threads.restore(threads)

    def apply(self, image: Any) -> Any:
        """Transform one image."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


def as_step(t: Any) -> Callable[[Any], Any]:
    """What runs one image through ``t``: a Transform's ``apply``, or any other callable as it is."""
    return t.apply if isinstance(t, Transform) else t


def nested_repr(name: str, transforms: Sequence[Any], extra: str = "") -> str:
    """``Name(\\n  t1,\\n  t2\\n, extra)`` with the transforms indented, like torchvision's containers."""
    inner = "".join("\n  " + repr(t).replace("\n", "\n  ") + "," for t in transforms)
    return f"{name}({inner}\n{extra})" if transforms else f"{name}({extra})"


class Compose(Transform):
    """Apply ``transforms`` in order: torch_drt transforms and any other callables on one image (torchvision's
    v2 transforms, for example). The loader accepts a Compose directly as its ``transform``, and a dataset as its
    ``transform`` (``torchvision.datasets.ImageFolder(root, transform=Compose([...]))``). A PIL image that is still
    one after the steps (only torchvision's steps saw it) is returned as an ``Image``, as ``v2.ToImage`` gives it.

    Args:
        transforms: the transforms.
    """

    def __init__(self, transforms: Sequence[Any]) -> None:
        for t in transforms:
            if not callable(t):
                raise TypeError(f"{t!r} is not callable")
        self.transforms = list(transforms)
        self._steps = [as_step(t) for t in _fuse(self.transforms)]

    def apply(self, image: Any) -> Any:
        for step in self._steps:
            image = step(image)
        return image_if_pil(image)  # a PIL image that only torchvision steps saw: as ToImage gives it

    def __repr__(self) -> str:
        return nested_repr("Compose", self.transforms)


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
