"""The build benchmark's per-image work, shared by torch_drt and the peers (stdlib and Pillow only).

Each input is a JPEG file; converting it means decoding it, resizing to 224 x 224 and re-encoding it (quality 90).
The label is the file's number modulo 1000.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

SIZE = 224


def convert(path: str) -> bytes:
    """Decode, resize to 224 x 224 (bilinear) and re-encode one JPEG."""
    with Image.open(path) as im:
        small = im.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
    out = io.BytesIO()
    small.save(out, "JPEG", quality=90)
    return out.getvalue()


def label_of(path: str) -> int:
    """The image's label: its number modulo 1000."""
    return int(Path(path).stem.rsplit("_", 1)[1]) % 1000
