"""Decode: PNG, JPEG, WebP, TIFF and BMP bytes to a uint8 HWC image with the image's own channels."""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch
from PIL import Image as PILImage

from torch_drt.transforms._image import MAX_ALLOC, MAX_SIDE, Image
from torch_drt.transforms.base import Transform

__all__ = ["Decode"]

_BANDS = {
    "1": 1,
    "L": 1,
    "LA": 2,
    "La": 2,
    "RGB": 3,
    "RGBA": 4,
    "RGBa": 4,
    "P": 4,
    "PA": 4,
    "CMYK": 4,
    "YCbCr": 3,
    "LAB": 3,
    "HSV": 3,
}
_AS = {"1": "L", "La": "LA", "RGBa": "RGBA", "PA": "RGBA", "CMYK": "RGB", "YCbCr": "RGB", "LAB": "RGB", "HSV": "RGB"}
_FORMATS = ("PNG", "JPEG", "WEBP", "TIFF", "BMP", "GIF")


class Decode(Transform):
    """Decode encoded image bytes with Pillow (its decoders release the GIL).

    The result has the image's own channels: grey 1, grey + alpha 2, RGB 3, RGBA 4; palette images become RGB,
    or RGBA when they carry transparency; CMYK and YCbCr become RGB. The size is read from the header and
    checked against the limits before any pixel is decoded, so a decompression bomb is refused without
    allocating it.

    Args:
        max_width: widest accepted image.
        max_height: tallest accepted image.
        max_alloc: largest accepted decoded size in bytes.

    Raises:
        ValueError: for bytes that are not an image, a corrupt or truncated image, one over the limits, or a
            16-bit / float image.
        TypeError: for input that is not bytes-like.
    """

    def __init__(self, max_width: int = MAX_SIDE, max_height: int = MAX_SIDE, max_alloc: int = MAX_ALLOC) -> None:
        for name, value in (("max_width", max_width), ("max_height", max_height), ("max_alloc", max_alloc)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int > 0")
        self.max_width, self.max_height, self.max_alloc = max_width, max_height, max_alloc

    def __call__(self, data: bytes | bytearray | memoryview) -> Image:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"Decode takes encoded bytes, got {type(data).__name__}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
                im = PILImage.open(io.BytesIO(data), formats=_FORMATS)
        except PILImage.DecompressionBombError as e:
            raise ValueError(f"image refused before decoding: {e}") from None
        except (PILImage.UnidentifiedImageError, OSError, SyntaxError) as e:
            raise ValueError(f"not a decodable image ({len(data)} bytes): {e}") from None
        width, height = im.size
        bands = _BANDS.get(im.mode)
        if bands is None:
            raise ValueError(
                f"unsupported image mode {im.mode!r} ({im.format}): 16-bit and float images are not decoded"
            )
        if width > self.max_width or height > self.max_height:
            raise ValueError(
                f"image of {width}x{height} is over Decode's limits ({self.max_width}x{self.max_height}); "
                "refused before decoding"
            )
        if width * height * bands > self.max_alloc:
            raise ValueError(
                f"image of {width}x{height}x{bands} needs {width * height * bands} bytes, over max_alloc="
                f"{self.max_alloc}; refused before decoding"
            )
        try:
            im.load()
        except (OSError, SyntaxError, ValueError) as e:
            raise ValueError(f"corrupt or truncated {im.format} image: {e}") from None
        mode = im.mode
        if mode == "P":
            mode = "RGBA" if "transparency" in im.info else "RGB"
        target = _AS.get(mode, mode)
        if target != im.mode:
            im = im.convert(target)
        arr = np.array(im)  # a writable copy
        if arr.ndim == 2:
            arr = arr[:, :, None]
        return Image(torch.from_numpy(arr), "hwc")
