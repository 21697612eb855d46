"""ColorJitter and RandomGrayscale with torchvision v2's parameters and values, on uint8 or float32 images."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torch_drt.random import item_generator
from torch_drt.transforms import _draw
from torch_drt.transforms._image import MAX_ALLOC, Image, as_image, check_alloc, check_max_alloc, plain
from torch_drt.transforms.base import Transform

__all__ = ["ColorJitter", "RandomGrayscale", "adjust_brightness", "adjust_contrast", "adjust_saturation", "grayscale"]

Range = float | Sequence[float] | None


def _colour_image(image: Any, what: str, max_alloc: int) -> torch.Tensor:
    """The plain (C, H, W) tensor of a grey or RGB uint8/float32 image, its float work checked against the limit."""
    image = as_image(image)
    chw = plain(image)
    if chw.shape[0] not in (1, 3):
        raise ValueError(f"{what} takes grey or RGB images (1 or 3 channels), got {chw.shape[0]}: apply ToRgb first")
    check_alloc(f"{what} of {tuple(chw.shape)}", chw.numel() * 4 * 2, max_alloc)  # float work and the result
    return chw


def _gray_float(chw: torch.Tensor) -> torch.Tensor:
    """torchvision's luma in float32, (1, H, W): ``r * 0.2989 + g * 0.587 + b * 0.114``."""
    r, g, b = chw.unbind(dim=-3)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(dim=-3)


def _blend(a: torch.Tensor, b: torch.Tensor, ratio: float) -> torch.Tensor:
    """torchvision's ``_blend``: ``a * ratio + b * (1 - ratio)``, clamped, in ``a``'s dtype."""
    fp = a.is_floating_point()
    out = a.mul(ratio).add_(b, alpha=1.0 - ratio).clamp_(0, 1.0 if fp else 255)
    return out if fp else out.to(a.dtype)


def adjust_brightness(chw: torch.Tensor, factor: float) -> torch.Tensor:
    """``F.adjust_brightness`` on a plain grey or RGB (C, H, W) tensor."""
    fp = chw.is_floating_point()
    out = chw.mul(factor).clamp_(0, 1.0 if fp else 255)
    return out if fp else out.to(chw.dtype)


def adjust_contrast(chw: torch.Tensor, factor: float) -> torch.Tensor:
    """``F.adjust_contrast``: blend with the mean of the (floored, for uint8) luma."""
    fp = chw.is_floating_point()
    if chw.shape[-3] == 3:
        gray = _gray_float(chw)
        if not fp:
            gray.floor_()
    else:
        gray = chw if fp else chw.to(torch.float32)
    return _blend(chw, torch.mean(gray, dim=(-3, -2, -1), keepdim=True), factor)


def adjust_saturation(chw: torch.Tensor, factor: float) -> torch.Tensor:
    """``F.adjust_saturation``: blend with the (floored, for uint8) luma; grey images are returned as they are."""
    if chw.shape[-3] == 1:
        return chw
    gray = _gray_float(chw)
    if not chw.is_floating_point():
        gray.floor_()
    return _blend(chw, gray, factor)


def grayscale(chw: torch.Tensor, channels: int) -> torch.Tensor:
    """``F.rgb_to_grayscale(num_output_channels=channels)`` as a real (not expanded) tensor."""
    if chw.shape[-3] == 1:
        return chw.clone() if channels == 1 else chw.repeat(3, 1, 1)
    gray = _gray_float(chw).to(chw.dtype)
    return gray if channels == 1 else gray.expand(3, -1, -1).contiguous()


def _range(value: Range, name: str, center: float = 1.0, bound: tuple[float, float] = (0, float("inf")),
           clip_first_on_zero: bool = True) -> tuple[float, float] | None:
    """torchvision ``ColorJitter._check_input``: a factor range, or None for no change."""
    if value is None:
        return None
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{name}={value} must be non-negative")
        low, high = center - value, center + value
        if clip_first_on_zero:
            low = max(low, 0.0)
    elif isinstance(value, Sequence) and len(value) == 2:
        low, high = float(value[0]), float(value[1])
    else:
        raise TypeError(f"{name}={value!r} must be a number or a (min, max) pair")
    if not bound[0] <= low <= high <= bound[1]:
        raise ValueError(f"{name}={value!r} must give factors in {bound}, increasing")
    return None if low == high == center else (float(low), float(high))


class ColorJitter(Transform):
    """torchvision v2 ``ColorJitter``: brightness, contrast, saturation and hue factors drawn like torchvision
    (``randperm(4)`` for the order, then one ``uniform_`` per factor given) from the item's generator, applied
    with torchvision's values to grey or RGB images, uint8 or float32.

    Args:
        brightness: factor range, or ``x`` for ``[max(0, 1 - x), 1 + x]``.
        contrast: as ``brightness``.
        saturation: as ``brightness``.
        hue: range within [-0.5, 0.5], or ``x`` for ``[-x, x]``.
        max_alloc: the most bytes one image's adjustment may allocate.
    """

    def __init__(self, brightness: Range = None, contrast: Range = None, saturation: Range = None, hue: Range = None,
                 max_alloc: int = MAX_ALLOC) -> None:
        self.brightness = _range(brightness, "brightness")
        self.contrast = _range(contrast, "contrast")
        self.saturation = _range(saturation, "saturation")
        self.hue = _range(hue, "hue", center=0, bound=(-0.5, 0.5), clip_first_on_zero=False)
        self.max_alloc = check_max_alloc(max_alloc)

    def draw(self, g: torch.Generator) -> tuple[list[int], list[float | None]]:
        """The order and the factors (brightness, contrast, saturation, hue), as torchvision draws them."""
        order = _draw.jitter_order(g)
        factors = [None if r is None else _draw.uniform(r[0], r[1], g)
                   for r in (self.brightness, self.contrast, self.saturation, self.hue)]
        return order, factors

    def apply(self, image: Any) -> Image:
        order, factors = self.draw(item_generator())
        if all(f is None for f in factors):
            return as_image(image)
        chw = _colour_image(image, "ColorJitter", self.max_alloc)
        out = chw
        for fn_id in order:
            factor = factors[fn_id]
            if factor is None:
                continue
            if fn_id == 0:
                out = adjust_brightness(out, factor)
            elif fn_id == 1:
                out = adjust_contrast(out, factor)
            elif fn_id == 2:
                out = adjust_saturation(out, factor)
            elif out.shape[-3] == 3:
                from torchvision.transforms.v2.functional import adjust_hue_image

                out = adjust_hue_image(out, hue_factor=factor)
        return out.as_subclass(Image) if out is not chw else as_image(image)


class RandomGrayscale(Transform):
    """torchvision v2 ``RandomGrayscale(p)``: with probability ``p`` the luma, in as many channels as the image
    has (1 or 3). Grey or RGB images, uint8 or float32."""

    def __init__(self, p: float = 0.1, max_alloc: int = MAX_ALLOC) -> None:
        self.p = _draw.check_p(p)
        self.max_alloc = check_max_alloc(max_alloc)

    def apply(self, image: Any) -> Image:
        if not _draw.coin(self.p, item_generator()):
            return as_image(image)
        chw = _colour_image(image, "RandomGrayscale", self.max_alloc)
        return grayscale(chw, chw.shape[0]).as_subclass(Image)
