"""PNG decoding through imagecodecs' libpng binding: the whole decode in one call without the GIL.

Used for the PNG kinds whose pixels Pillow gives unchanged (8-bit grey, grey + alpha, RGB and RGBA, without a tRNS
chunk, not animated): lossless, so the values are Pillow's, bit for bit. Palette images, 1-4 bit samples,
transparency chunks and APNG go through Pillow, which converts them as ``Decode`` documents.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from torch_drt.transforms._formats import PngHeader

# any buffer, memoryview too (imagecodecs' stub says bytes, bytearray or mmap); None without imagecodecs
_png_decode: Callable[..., np.ndarray] | None
try:  # a dependency; without it (or an older build) every PNG goes through Pillow
    from imagecodecs import png_decode as _png_decode
except ImportError:  # pragma: no cover - imagecodecs is installed with torch_drt
    _png_decode = None

CHANNELS = {0: 1, 4: 2, 2: 3, 6: 4}  # PNG colour type -> samples per pixel
_PILLOW_ONLY = (b"tRNS", b"acTL")  # transparency (Pillow keeps grey/RGB modes) and animation (frames)


def peak(header: PngHeader) -> int:
    """Bytes the libpng path allocates at its peak: the output, two rows and zlib's window."""
    channels = CHANNELS[header.colour]
    return header.width * header.height * channels + 2 * (header.width * channels + 1) + 64 * 1024


def eligible(data: bytes | bytearray | memoryview, header: PngHeader) -> bool:
    """Whether the libpng path gives Pillow's pixels for this PNG (and is installed)."""
    if _png_decode is None or header.depth != 8 or header.colour not in CHANNELS:
        return False
    view = data if isinstance(data, bytes | bytearray) else bytes(data)
    first_idat = view.find(b"IDAT")
    # chunks before the image data; a false match (the four bytes inside another chunk) only means Pillow decodes
    return first_idat > 0 and not any(view.find(kind, 0, first_idat) >= 0 for kind in _PILLOW_ONLY)


def decode(data: bytes | bytearray | memoryview, header: PngHeader) -> np.ndarray:
    """The (H, W, C) uint8 pixels of an ``eligible`` PNG.

    Raises:
        ValueError: for a corrupt or truncated PNG (libpng's message), or pixels that do not match the header.
    """
    try:
        arr = _png_decode(data)  # type: ignore[misc]
    except Exception as e:  # libpng's errors (PngError), a message that is not UTF-8, ...
        raise ValueError(f"corrupt or truncated PNG image: {type(e).__name__}: {e}") from None
    channels = CHANNELS[header.colour]
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.dtype != np.uint8 or arr.shape != (header.height, header.width, channels):
        raise ValueError(
            f"PNG image decoded to {arr.shape} {arr.dtype}, its header says "
            f"{(header.height, header.width, channels)} uint8"
        )
    return arr
