"""ColorJitter and RandomGrayscale with torchvision v2's parameters and values, on uint8 or float32 images."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torch_drt.transforms import _draw
from torch_drt.transforms._image import MAX_ALLOC, Image, as_image, check_alloc, check_max_alloc, plain, to_uint8
from torch_drt.transforms.base import Transform

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


def _settle(x: torch.Tensor, integral: bool) -> torch.Tensor:
    """Clamp to the value range, and truncate like torchvision's conversion back to uint8 for uint8 images."""
    return x.clamp_(0, 255).floor_() if integral else x.clamp_(0, 1.0)  # floor: trunc for values >= 0, faster


def _blend_(x: torch.Tensor, other: torch.Tensor, ratio: float, integral: bool) -> torch.Tensor:
    """torchvision's ``_blend`` in place: ``x * ratio + other * (1 - ratio)``, clamped (and truncated)."""
    return _settle(x.mul_(ratio).add_(other, alpha=1.0 - ratio), integral)


def adjust_brightness_(x: torch.Tensor, factor: float, integral: bool) -> torch.Tensor:
    """``F.adjust_brightness`` in place on a float32 grey or RGB (C, H, W) tensor.

    ``integral``: ``x`` holds a uint8 image's values; each step truncates as torchvision's uint8 result does, so
    that a chain of steps on one float tensor gives torchvision's uint8 values without converting back and forth.
    """
    return _settle(x.mul_(factor), integral)


def adjust_contrast_(x: torch.Tensor, factor: float, integral: bool) -> torch.Tensor:
    """``F.adjust_contrast`` in place: blend with the mean of the (floored, for uint8) luma."""
    gray = x
    if x.shape[-3] == 3:
        gray = _gray_float(x)
        if integral:
            gray.floor_()
    return _blend_(x, torch.mean(gray, dim=(-3, -2, -1), keepdim=True), factor, integral)


def adjust_saturation_(x: torch.Tensor, factor: float, integral: bool) -> torch.Tensor:
    """``F.adjust_saturation`` in place: blend with the (floored, for uint8) luma; grey images stay as they are."""
    if x.shape[-3] == 1:
        return x
    gray = _gray_float(x)
    if integral:
        gray.floor_()
    return _blend_(x, gray, factor, integral)


def adjust_hue_(x: torch.Tensor, factor: float, integral: bool) -> torch.Tensor:
    """``F.adjust_hue`` (torchvision's kernel, on floats in [0, 1]); grey images stay as they are."""
    if x.shape[-3] == 1:
        return x
    from torchvision.transforms.v2.functional import adjust_hue_image

    if not integral:
        return adjust_hue_image(x, hue_factor=factor)
    out = adjust_hue_image(x.mul_(1.0 / 255), hue_factor=factor)  # torchvision's uint8 -> float32 conversion
    return out.mul_(255 + 1.0 - 1e-3).floor_()  # and its float32 -> uint8 one (values >= 0: floor is trunc)


def grayscale(chw: torch.Tensor, channels: int) -> torch.Tensor:
    """``F.rgb_to_grayscale(num_output_channels=channels)`` as a real (not expanded) tensor."""
    if chw.shape[-3] == 1:
        return chw.clone() if channels == 1 else chw.repeat(3, 1, 1)
    gray = _gray_float(chw)  # in [0, 255): the weights sum to 0.9999
    gray = gray if chw.is_floating_point() else to_uint8(gray)
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
        order, factors = self.draw(_draw.generator())
        if all(f is None for f in factors):
            return as_image(image)
        chw = _colour_image(image, "ColorJitter", self.max_alloc)
        integral = chw.dtype == torch.uint8
        x = chw.to(torch.float32) if integral else chw.clone()  # one working copy, in the input's memory layout
        for fn_id in order:
            factor = factors[fn_id]
            if factor is not None:
                x = _ADJUST[fn_id](x, factor, integral)
        return (to_uint8(x) if integral else x).as_subclass(Image)


_ADJUST = (adjust_brightness_, adjust_contrast_, adjust_saturation_, adjust_hue_)


class RandomGrayscale(Transform):
    """torchvision v2 ``RandomGrayscale(p)``: with probability ``p`` the luma, in as many channels as the image
    has (1 or 3). Grey or RGB images, uint8 or float32."""

    def __init__(self, p: float = 0.1, max_alloc: int = MAX_ALLOC) -> None:
        self.p = _draw.check_p(p)
        self.max_alloc = check_max_alloc(max_alloc)

    def apply(self, image: Any) -> Image:
        if not _draw.coin(self.p, _draw.generator()):
            return as_image(image)
        chw = _colour_image(image, "RandomGrayscale", self.max_alloc)
        return grayscale(chw, chw.shape[0]).as_subclass(Image)
