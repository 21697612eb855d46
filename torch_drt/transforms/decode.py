"""Decode: PNG, JPEG, WebP, TIFF and BMP bytes to a uint8 HWC image with the image's own channels."""

from __future__ import annotations

import io
import struct
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
# torchvision 0.29 deprecates its image codecs in favour of TorchCodec; they remain the GIL-free path here until
# removed (then Decode falls back to Pillow), so their deprecation notice is silenced for this use only.
warnings.filterwarnings(
    "ignore", message="The image decoding and encoding capabilities of TorchVision", category=DeprecationWarning
)
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_PNG_BANDS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}  # colour type -> channels (palette: RGB, or RGBA with tRNS)


def _jpeg_size(data: bytes | bytearray | memoryview) -> tuple[int, int, int] | None:
    """(width, height, components) from a JPEG's start-of-frame marker, or None when it cannot be found."""
    view = memoryview(data)
    pos, end = 2, len(view)
    while pos + 9 < end:
        if view[pos] != 0xFF:
            return None
        marker = view[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:  # markers without a length
            pos += 2
            continue
        length = (view[pos + 2] << 8) | view[pos + 3]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height = (view[pos + 5] << 8) | view[pos + 6]
            width = (view[pos + 7] << 8) | view[pos + 8]
            return width, height, view[pos + 9]
        pos += 2 + length
    return None


class Decode(Transform):
    """Decode encoded image bytes: PNG and JPEG with libpng / libjpeg-turbo (torchvision.io, one call without the
    GIL), the other formats with Pillow.

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

    def _check(self, width: int, height: int, bands: int) -> None:
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

    def __call__(self, data: bytes | bytearray | memoryview) -> Image:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"Decode takes encoded bytes, got {type(data).__name__}")
        head = bytes(data[:32])
        if head.startswith(_PNG_MAGIC) and len(data) > 33:
            fast = self._png(data, head)
            if fast is not None:
                return fast
        elif head.startswith(b"\xff\xd8\xff"):
            size = _jpeg_size(data)
            if size is not None and size[2] in (1, 3):
                self._check(*size)
                fast = self._torchvision(data, "JPEG", None)
                if fast is not None:
                    return fast
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
            raise ValueError(f"unsupported image mode {im.mode!r} ({im.format}): 16-bit and float images are refused")
        self._check(width, height, bands)
        if im.format == "JPEG" and im.mode in ("L", "RGB"):
            fast = self._torchvision(data, "JPEG", None)
            if fast is not None:
                return fast
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

    def _png(self, data: bytes | bytearray | memoryview, head: bytes) -> Image | None:
        """PNG straight from its IHDR: checked against the limits, decoded by libpng without the GIL.

        Returns None for the cases Pillow decodes differently (16-bit, transparency outside palettes).
        """
        if head[12:16] != b"IHDR":
            return None
        width, height, depth, colour = struct.unpack(">IIBB", head[16:26])
        bands = _PNG_BANDS.get(colour)
        if bands is None or depth == 16:
            return None
        has_trns = b"tRNS" in bytes(data[: data.find(b"IDAT") if isinstance(data, bytes) else len(data)])
        if has_trns and colour != 3:
            return None
        if colour == 3 and has_trns:
            bands = 4
        self._check(width, height, bands)
        return self._torchvision(data, "PNG", bands if colour == 3 else None)

    @staticmethod
    def _torchvision(data: bytes | bytearray | memoryview, fmt: str, palette_bands: int | None) -> Image | None:
        try:
            from torchvision.io import ImageReadMode, decode_jpeg, decode_png
        except ImportError:  # a torchvision without image codecs: Pillow decodes
            return None

        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        mode = {None: ImageReadMode.UNCHANGED, 3: ImageReadMode.RGB, 4: ImageReadMode.RGB_ALPHA}[palette_bands]
        try:
            chw = decode_png(encoded, mode=mode) if fmt == "PNG" else decode_jpeg(encoded, mode=mode)
        except RuntimeError as e:
            raise ValueError(f"corrupt or truncated {fmt} image: {str(e).splitlines()[0]}") from None
        return Image(chw.permute(1, 2, 0), "hwc")  # an HWC view of libpng's / libjpeg's CHW output
