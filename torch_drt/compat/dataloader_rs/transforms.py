"""dataloader-rs's ``transforms`` module: torch_drt's transforms (same names, arguments and values) with
dataloader-rs's images.

Called directly, each transform returns a ``torch_drt.compat.dataloader_rs.Image``, whose ``np.asarray`` and
``torch.from_dlpack`` views are HWC (``Decode``, ``ToHwc``, ``Image.from_array``) or CHW (``ToChw``) as in
dataloader-rs; other transforms keep their input's layout. Like every torch_drt transform they also take
``(image, target, ...)`` tuples and the loader's ``(index, item)`` form. A ``Compose`` of them runs torch_drt's
``Compose`` (its fused steps included) and converts once, at the end.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from torch_drt import transforms as _transforms
from torch_drt.compat.dataloader_rs.images import Image, ImageBatch, ImageCollator, unwrap

_CONTAINERS = ("Compose", "RandomApply", "RandomChoice")  # their transforms are given as a list
__all__ = [
    "MAX_ALLOC",
    "MAX_BATCH_ALLOC",
    "MAX_SIDE",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "Crop",
    "Decode",
    "HFlip",
    "Image",
    "ImageBatch",
    "ImageCollator",
    "Normalize",
    "Pad",
    "PadTo",
    "RandomApply",
    "RandomChoice",
    "RandomCrop",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomVerticalFlip",
    "Resize",
    "Rotate90",
    "ToChw",
    "ToFloat",
    "ToGray",
    "ToHwc",
    "ToRgb",
    "ToRgba",
    "VFlip",
]
MAX_ALLOC, MAX_BATCH_ALLOC, MAX_SIDE = _transforms.MAX_ALLOC, _transforms.MAX_BATCH_ALLOC, _transforms.MAX_SIDE


def _inner(t: Any) -> Any:
    """torch_drt's transform inside one of this module's; any other callable as it is."""
    return t.transform if isinstance(t, _Transform) else t


def _as_image(out: Any, layout: str) -> Any:
    return Image(out, layout) if isinstance(out, _transforms.Image) else out  # type: ignore[arg-type]


class _Transform:
    """A torch_drt transform (``transform``) taking and returning this package's ``Image``s.

    ``layout``: the layout of what it returns: ``"hwc"``/``"chw"``, ``None`` (its input's) or ``"memory"`` (the
    result's memory order).
    """

    wrapped: ClassVar[type]
    layout: ClassVar[str | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if type(self).__name__ in _CONTAINERS:  # their steps: torch_drt's transforms inside these
            if args:
                args = ([_inner(t) for t in args[0]], *args[1:])
            if "transforms" in kwargs:
                kwargs["transforms"] = [_inner(t) for t in kwargs["transforms"]]
        self.transform = self.wrapped(*args, **kwargs)

    def __call__(self, *args: Any) -> Any:
        if len(args) not in (1, 2):  # transform(item) or the loader's transform(index, item)
            raise TypeError(f"{type(self).__name__} takes (item) or (index, item), got {len(args)} arguments")
        item = args[-1]
        if type(item) is tuple and item:
            return (self._apply(item[0]), *item[1:])
        return self._apply(item)

    def _apply(self, image: Any) -> Any:
        if isinstance(image, Image):
            layout: str = image.layout
        elif isinstance(image, _transforms.Image):
            layout = image.memory_layout
        else:
            layout = "chw" if isinstance(image, torch.Tensor) else "hwc"  # torch_drt reads arrays as HWC
        out = self.transform.apply(unwrap(image))
        return _as_image(out, self.output_layout(layout, out))

    def output_layout(self, layout: str, out: Any) -> str:
        """The layout of ``out``, computed from its input's ``layout``."""
        if self.layout == "memory":
            return out.memory_layout if isinstance(out, _transforms.Image) and out.shape[0] > 1 else layout
        return self.layout or layout

    def __repr__(self) -> str:
        return repr(self.transform)


class Compose(_Transform):
    """dataloader-rs's ``Compose``: apply ``transforms`` in order (torch_drt's ``Compose``, fused steps included)."""

    wrapped = _transforms.Compose

    def __init__(self, transforms: Sequence[Any]) -> None:
        self.transforms = list(transforms)
        if all(isinstance(t, _Transform) and t.transform is not None for t in self.transforms):
            self.transform = _transforms.Compose([t.transform for t in self.transforms])
        else:  # other callables see this package's images: each step is called as it is
            self.transform = None

    def _apply(self, image: Any) -> Any:
        if self.transform is not None:
            return super()._apply(image)
        for t in self.transforms:
            image = t(image)
        return image

    def output_layout(self, layout: str, out: Any) -> str:
        for t in self.transforms:
            layout = t.output_layout(layout, out)
        return layout

    def __repr__(self) -> str:
        return repr(_transforms.Compose(self.transforms))


def _wrapper(name: str, layout: str | None = None) -> Any:
    """The class of this module for torch_drt's transform ``name``, whose output has ``layout``."""
    wrapped = getattr(_transforms, name)
    namespace = {
        "wrapped": wrapped,
        "layout": layout,
        "__doc__": wrapped.__doc__,
        "__module__": __name__,
        "__qualname__": name,
        "__signature__": inspect.signature(wrapped),
    }
    return type(name, (_Transform,), namespace)


CenterCrop = _wrapper("CenterCrop")
ColorJitter = _wrapper("ColorJitter")
Crop = _wrapper("Crop")
Decode = _wrapper("Decode", "hwc")
HFlip = _wrapper("HFlip")
Normalize = _wrapper("Normalize")
Pad = _wrapper("Pad")
PadTo = _wrapper("PadTo")
RandomApply = _wrapper("RandomApply", "memory")
RandomChoice = _wrapper("RandomChoice", "memory")
RandomCrop = _wrapper("RandomCrop")
RandomErasing = _wrapper("RandomErasing")
RandomGrayscale = _wrapper("RandomGrayscale")
RandomHorizontalFlip = _wrapper("RandomHorizontalFlip")
RandomResizedCrop = _wrapper("RandomResizedCrop")
RandomVerticalFlip = _wrapper("RandomVerticalFlip")
Resize = _wrapper("Resize")
Rotate90 = _wrapper("Rotate90")
ToChw = _wrapper("ToChw", "chw")
ToFloat = _wrapper("ToFloat")
ToGray = _wrapper("ToGray")
ToHwc = _wrapper("ToHwc", "hwc")
ToRgb = _wrapper("ToRgb")
ToRgba = _wrapper("ToRgba")
VFlip = _wrapper("VFlip")
