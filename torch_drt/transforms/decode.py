"""Decode: PNG, JPEG, WebP, TIFF, BMP and GIF bytes to a uint8 Image with the image's own channels."""

from __future__ import annotations

import io
import re
import warnings
from typing import Any

import numpy as np
import torch
from PIL import Image as PILImage

from torch_drt.transforms import _png
from torch_drt.transforms._formats import jpeg_header, png_header, tiff_deep_reason, webp_header
from torch_drt.transforms._image import MAX_ALLOC, MAX_SIDE, Image, check_max_alloc, from_hwc
from torch_drt.transforms.base import Transform

_TARGET = {  # Pillow mode -> the mode of the result ("P" depends on transparency)
    "1": "L",
    "L": "L",
    "LA": "LA",
    "La": "LA",
    "RGB": "RGB",
    "RGBA": "RGBA",
    "RGBa": "RGBA",
    "PA": "RGBA",
    "CMYK": "RGB",
    "YCbCr": "RGB",
    "LAB": "RGB",
    "HSV": "RGB",
}
_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}
_DEEP_MODES = dict.fromkeys(("I;16", "I;16B", "I;16L", "I;16N"), "16-bit samples")
_DEEP_MODES |= {"I": "32-bit samples", "F": "float samples"}
_FORMATS = ("PNG", "JPEG", "WEBP", "TIFF", "BMP", "GIF")
_OPS: dict[str, Any] | None = None  # torchvision's decoding ops, found on first use
_TORCHVISION_ERROR_PREFIX = re.compile(r"^\w+, \S+:\d+, ")
# torchvision 0.29 deprecates its image codecs in favour of TorchCodec; its JPEG decoder remains the GIL-free path
# here until removed (then Decode falls back to Pillow), so its deprecation notice is silenced for this use only.
warnings.filterwarnings(
    "ignore", message="The image decoding and encoding capabilities of TorchVision", category=DeprecationWarning
)


def _pillow_peak(mode: str, target: str, fmt: str, pixels: int) -> int:
    """Bytes Pillow's path allocates at its peak: Pillow's own image (1 or 4 bytes a pixel), the converted image,
    the output twice (``tobytes`` and the array), two bytes of decoder buffers, and WebP's canvas and frame."""
    own = 1 if mode in ("1", "L", "P") else 4
    channels = _CHANNELS[target]
    converted = 0 if target == mode else (1 if channels == 1 else 4)
    return pixels * (own + converted + 2 * channels + 2 + (12 if fmt == "WEBP" else 0))


class Decode(Transform):
    """Decode encoded image bytes: JPEG and still WebP with libjpeg-turbo and libwebp (torchvision.io), 8-bit grey,
    grey + alpha, RGB and RGBA PNG with libpng (imagecodecs), each in one call without the GIL; every other
    format, and PNGs with a palette, fewer bits, transparency chunks or animation, with Pillow.

    The result is an ``Image`` (C, H, W) in HWC memory with the image's own channels: grey 1, grey + alpha 2, RGB
    3, RGBA 4; palette images become RGB, or RGBA when they carry transparency; CMYK and YCbCr become RGB. The size
    is read from the header and the decoder's peak memory checked against the limits before any pixel is decoded,
    so a decompression bomb is refused without allocating it. Images with more than 8 bits per sample (16-bit
    PNG and TIFF, 12-bit JPEG) or float samples are refused: they are never cut to 8 bits.

    A PIL image (what ``torchvision.datasets.ImageFolder`` and ``PIL.Image.open`` give) is converted as its bytes
    would be decoded, without decoding again, so one pipeline serves encoded bytes and a dataset's PIL images.

    PNG never goes through torchvision's decoder: it crashes the interpreter (SIGSEGV) when libpng finds an error in
    the image data, which any corrupt file can trigger. imagecodecs' libpng binding reports such errors, and gives
    the same pixels as Pillow (PNG is lossless; the kinds Pillow would convert go to Pillow).

    Args:
        max_width: widest accepted image.
        max_height: tallest accepted image.
        max_alloc: the most bytes decoding may allocate at its peak (the decoder's buffers and the output).

    Raises:
        ValueError: for bytes that are not an image, a corrupt or truncated image, one over the limits, or a
            16-bit, 12-bit or float image.
        TypeError: for input that is neither bytes-like nor a PIL image.
    """

    def __init__(self, max_width: int = MAX_SIDE, max_height: int = MAX_SIDE, max_alloc: int = MAX_ALLOC) -> None:
        for name, value in (("max_width", max_width), ("max_height", max_height)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an int > 0")
        self.max_width, self.max_height = max_width, max_height
        self.max_alloc = check_max_alloc(max_alloc)

    def _check(self, width: int, height: int, peak: int) -> None:
        if width > self.max_width or height > self.max_height:
            raise ValueError(
                f"image of {width}x{height} is over Decode's limits ({self.max_width}x{self.max_height}); "
                "refused before decoding"
            )
        if peak > self.max_alloc:
            raise ValueError(
                f"decoding an image of {width}x{height} needs {peak:,} bytes, over max_alloc={self.max_alloc:,}; "
                "refused before decoding"
            )

    def apply(self, data: bytes | bytearray | memoryview | PILImage.Image) -> Image:
        if isinstance(data, PILImage.Image):  # opened already (a dataset's loader): the conversion is left
            return self._convert(data)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"Decode takes encoded bytes or a PIL image, got {type(data).__name__}")
        png = png_header(data)
        if png is not None and png.depth > 8:
            raise ValueError(f"{png.depth}-bit PNG refused: images are decoded to 8 bits and never cut")
        if png is not None and _png.eligible(data, png):
            self._check(png.width, png.height, _png.peak(png))
            return from_hwc(torch.from_numpy(_png.decode(data, png)))
        jpeg = jpeg_header(data) if png is None else None
        if jpeg is not None:
            if jpeg.precision != 8:
                raise ValueError(f"{jpeg.precision}-bit JPEG refused: images are decoded to 8 bits and never cut")
            if jpeg.components in (1, 3) and jpeg.width and jpeg.height:
                pixels = jpeg.width * jpeg.height
                bytes_per_pixel = jpeg.components * (3 if jpeg.progressive else 1) + 1  # + coefficients, buffers
                self._check(jpeg.width, jpeg.height, pixels * bytes_per_pixel)
                fast = _torchvision(data, "JPEG")
                if fast is not None:
                    return fast
        webp = webp_header(data) if png is None and jpeg is None else None
        if webp is not None and not webp.animated:
            channels = 4 if webp.alpha else 3
            self._check(webp.width, webp.height, webp.width * webp.height * (channels + 5))  # + libwebp's ARGB rows
            fast = _torchvision(data, "WEBP")
            if fast is not None:
                return fast
        return self._pillow(data)

    def _pillow(self, data: bytes | bytearray | memoryview) -> Image:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
                im = PILImage.open(io.BytesIO(data), formats=_FORMATS)
        except PILImage.DecompressionBombError as e:
            raise ValueError(f"image refused before decoding: {e}") from None
        except Exception as e:  # Pillow raises many types on corrupt headers (OSError, SyntaxError, TypeError...)
            raise ValueError(f"not a decodable image ({len(data)} bytes): {type(e).__name__}: {e}") from None
        return self._convert(im)

    def _convert(self, im: PILImage.Image) -> Image:
        """An opened (or loaded) Pillow image, loaded and converted as decoding converts it."""
        width, height = im.size
        fmt = im.format or "PIL"
        deep = _DEEP_MODES.get(im.mode) or (tiff_deep_reason(im) if im.format == "TIFF" else None)
        if deep is not None:
            raise ValueError(f"{fmt} image with {deep} refused: images are decoded to 8 bits and never cut")
        if im.mode == "P":
            target = "RGBA" if "transparency" in im.info else "RGB"
        elif im.mode in _TARGET:
            target = _TARGET[im.mode]
        else:
            raise ValueError(f"unsupported image mode {im.mode!r} ({fmt})")
        self._check(width, height, _pillow_peak(im.mode, target, fmt, width * height))
        try:
            im.load()  # nothing to do for a loaded image
        except Exception as e:  # as above, for corrupt image data
            raise ValueError(f"corrupt or truncated {fmt} image: {type(e).__name__}: {e}") from None
        if target != im.mode:
            im = im.convert(target)
        arr = np.array(im)  # a writable copy
        del im
        return from_hwc(torch.from_numpy(arr[:, :, None] if arr.ndim == 2 else arr))


def _torchvision_ops() -> dict[str, Any] | None:
    """``fmt -> decode(encoded)``: torchvision's JPEG and WebP ops, called as ``decode_jpeg``/``decode_webp`` call
    them with ``ImageReadMode.UNCHANGED``, or None when torchvision has no codecs. The ops are called directly:
    those functions also issue their deprecation warning and log API usage on every call, about 25 us per image
    with the GIL held (the filter above silences the warning, not its cost). Where the ops are not found under
    these names (another torchvision), the public functions are used."""
    global _OPS
    if _OPS is None:
        try:
            from torchvision.io import ImageReadMode, decode_jpeg, decode_webp
        except ImportError:
            _OPS = {}
            return None
        unchanged = ImageReadMode.UNCHANGED
        try:
            jpeg, webp, mode = torch.ops.image.decode_jpeg.default, torch.ops.image.decode_webp.default, unchanged.value
            _OPS = {"JPEG": lambda t: jpeg(t, mode, False), "WEBP": lambda t: webp(t, mode)}
        except (AttributeError, RuntimeError):
            _OPS = {"JPEG": lambda t: decode_jpeg(t, mode=unchanged), "WEBP": lambda t: decode_webp(t, mode=unchanged)}
    return _OPS or None


def _torchvision(data: bytes | bytearray | memoryview, fmt: str) -> Image | None:
    """libjpeg-turbo or libwebp through torchvision (without the GIL), or None when torchvision has no codecs."""
    ops = _torchvision_ops()
    if ops is None:
        return None
    encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    try:
        chw = ops[fmt](encoded)
    except RuntimeError as e:
        message = _TORCHVISION_ERROR_PREFIX.sub("", str(e).splitlines()[0])
        raise ValueError(f"corrupt or truncated {fmt} image: {message}") from None
    return chw.as_subclass(Image)  # the decoder's HWC buffer, seen as (C, H, W)
