"""Image transforms against Pillow and torchvision on generated fixtures of every mode and odd sizes."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from PIL import Image as P
from torchvision import transforms as TV

from torch_drt import transforms as T


def hwc(image) -> np.ndarray:
    """An Image's data as the (H, W, C) array Pillow and numpy use."""
    return image.hwc.numpy()

SIZES = [(1, 1), (5, 3), (17, 31), (40, 23)]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def pil_image(mode: str, size: tuple[int, int], seed: int = 0) -> P.Image:
    rng = np.random.default_rng(seed)
    w, h = size
    if mode == "P":
        im = P.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).convert("P", palette=P.ADAPTIVE, colors=16)
        return im
    if mode == "PT":  # palette with a transparent index
        im = pil_image("P", size, seed)
        im.info["transparency"] = 3
        return im
    bands = {"1": 1, "L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[mode]
    arr = rng.integers(0, 256, (h, w, bands), dtype=np.uint8)
    if mode == "1":
        return P.fromarray((arr[:, :, 0] > 127).astype(np.uint8) * 255).convert("1")
    return P.fromarray(arr[:, :, 0] if bands == 1 else arr, mode)


def encode(im: P.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    kwargs = {"lossless": True} if fmt == "WEBP" else {}
    if im.mode == "P" and "transparency" in im.info:
        kwargs["transparency"] = im.info["transparency"]
    im.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def pil_decoded(data: bytes) -> np.ndarray:
    """The reference: Pillow decoding, with the documented mode mapping."""
    im = P.open(io.BytesIO(data))
    target = {"1": "L", "P": "RGBA" if "transparency" in im.info else "RGB", "CMYK": "RGB"}.get(im.mode, im.mode)
    arr = np.array(im.convert(target))
    return arr[:, :, None] if arr.ndim == 2 else arr


LOSSLESS = [("PNG", m) for m in ("1", "L", "LA", "RGB", "RGBA", "P", "PT")] + [
    ("BMP", "L"), ("BMP", "RGB"), ("TIFF", "L"), ("TIFF", "RGB"), ("TIFF", "RGBA"), ("WEBP", "RGB"), ("WEBP", "RGBA"),
]


@pytest.mark.parametrize(("fmt", "mode"), LOSSLESS)
@pytest.mark.parametrize("size", SIZES)
def test_decode_equals_pillow_bit_for_bit(fmt, mode, size):
    data = encode(pil_image(mode, size), fmt)
    out = T.Decode()(data)
    assert out.dtype == torch.uint8 and out.memory_layout == ("chw" if out.shape[0] == 1 else "hwc")
    assert np.array_equal(hwc(out), pil_decoded(data))
    channels = {"1": 1, "L": 1, "LA": 2, "RGB": 3, "RGBA": 4, "P": 3, "PT": 4}[mode]
    if fmt != "WEBP":
        assert out.shape[0] == channels


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_jpeg_within_a_few_levels_of_pillow(mode):
    data = encode(pil_image(mode, (40, 23)), "JPEG")
    diff = np.abs(hwc(T.Decode()(data)).astype(int) - pil_decoded(data).astype(int))
    assert diff.max() <= 3


@pytest.mark.parametrize(("fmt", "mode"), [("PNG", "RGB"), ("PNG", "RGBA"), ("PNG", "L"), ("PNG", "P"),
                                           ("PNG", "PT"), ("PNG", "LA"), ("BMP", "RGB")])
@pytest.mark.parametrize("size", [(17, 31), (5, 3), (32, 32)])
def test_chain_equals_pillow_pad_totensor_normalize(fmt, mode, size):
    data = encode(pil_image(mode, size), fmt)
    ours = T.Compose([T.Decode(), T.ToRgb(), T.PadTo(32, 32), T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()])(data)
    ref = TV.ToTensor()(P.open(io.BytesIO(data)).convert("RGB"))
    ref = F.pad(ref, [0, 0, 32 - ref.shape[2], 32 - ref.shape[1]])
    ref = TV.Normalize(MEAN, STD)(ref)
    assert ours.dtype == torch.float32 and ours.memory_layout == "chw" and torch.equal(ours, ref)


@pytest.mark.parametrize("source", ["1", "L", "LA", "RGB", "RGBA", "P", "PT"])
@pytest.mark.parametrize(("transform", "target"), [(T.ToRgb, "RGB"), (T.ToRgba, "RGBA"), (T.ToGray, "L")])
def test_colour_conversions_equal_pillow_convert(source, transform, target):
    data = encode(pil_image(source, (17, 31)), "PNG")
    decoded = T.Decode()(data)
    expected = np.array(P.fromarray(np.squeeze(hwc(decoded), -1) if decoded.shape[0] == 1 else
                                    hwc(decoded)).convert(target))
    got = hwc(transform()(decoded))
    assert np.array_equal(np.squeeze(got, -1) if expected.ndim == 2 else got, expected)


def chw(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(arr).permute(2, 0, 1)


@pytest.fixture(params=["uint8", "float32"])
def img(request):
    arr = np.random.default_rng(1).integers(0, 256, (13, 19, 3)).astype(request.param)
    return arr


@pytest.mark.parametrize(("ours", "ref"), [
    (T.Crop(2, 3, 7, 9), lambda t: F.crop(t, 2, 3, 7, 9)),
    (T.Crop(-2, 10, 20, 15), lambda t: F.crop(t, -2, 10, 20, 15)),
    (T.CenterCrop(7), lambda t: F.center_crop(t, [7, 7])),
    (T.CenterCrop((12, 4)), lambda t: F.center_crop(t, [12, 4])),
    (T.CenterCrop((20, 25)), lambda t: F.center_crop(t, [20, 25])),
    (T.Pad(3), lambda t: F.pad(t, [3], fill=0)),
    (T.Pad((1, 2), fill=7), lambda t: F.pad(t, [1, 2], fill=7)),
    (T.Pad((1, 2, 3, 4), padding_mode="edge"), lambda t: F.pad(t, [1, 2, 3, 4], padding_mode="edge")),
    (T.Pad((4, 1, 2, 3), padding_mode="reflect"), lambda t: F.pad(t, [4, 1, 2, 3], padding_mode="reflect")),
    (T.Pad((4, 1, 2, 3), padding_mode="symmetric"), lambda t: F.pad(t, [4, 1, 2, 3], padding_mode="symmetric")),
    (T.PadTo(25, 20), lambda t: F.pad(t, [0, 0, 25 - 19, 20 - 13])),
    (T.PadTo(24, 18, fill=5, anchor="center"), lambda t: F.pad(t, [2, 2, 3, 3], fill=5)),
    (T.PadTo(10, 10), lambda t: t),
    (T.HFlip(), F.hflip),
    (T.VFlip(), F.vflip),
])
def test_geometry_equals_torchvision(img, ours, ref):
    got = ours(T.Image.from_array(img))
    assert torch.equal(got, ref(chw(img)))


@pytest.mark.parametrize("k", [0, 1, 2, 3, -1, 5])
def test_rotate90_equals_numpy(img, k):
    assert np.array_equal(hwc(T.Rotate90(k)(img)), np.rot90(img, k))


def test_geometry_keeps_chw_layout(img):
    out = T.HFlip()(T.ToChw()(img))
    assert out.memory_layout == "chw" and torch.equal(out.tensor, F.hflip(chw(img)))


@pytest.mark.parametrize("mode", ["L", "LA", "RGB", "RGBA"])
@pytest.mark.parametrize(("interp", "pil"), [("bilinear", P.BILINEAR), ("nearest", P.NEAREST),
                                             ("bicubic", P.BICUBIC), ("lanczos3", P.LANCZOS)])
@pytest.mark.parametrize("size", [11, (9, 30), 60])
def test_resize_equals_pillow(mode, interp, pil, size):
    im = pil_image(mode, (41, 23))
    out = T.Resize(size, interpolation=interp)(T.Decode()(encode(im, "PNG")))
    ref_size = F.resize(im, size if isinstance(size, int) else list(size)).size  # torchvision's output size
    ref = np.array(im.resize(ref_size, pil))
    got = np.squeeze(hwc(out), -1) if ref.ndim == 2 else hwc(out)
    assert got.shape == ref.shape
    tolerance = {"bilinear": 1, "bicubic": 2}.get(interp, 0) if mode in ("L", "RGB") else 0
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= tolerance


def test_resize_max_size_and_no_antialias():
    im = pil_image("RGB", (80, 20))
    out = T.Resize(10, max_size=30)(np.array(im))
    assert out.shape[1:] == tuple(reversed(F.resize(im, 10, max_size=30).size))
    arr = np.array(im)
    got = hwc(T.Resize((10, 40), antialias=False)(arr))
    ref = F.resize(chw(arr), [10, 40], antialias=False).permute(1, 2, 0).numpy()
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1


def test_tofloat_and_normalize_equal_torchvision(img):
    arr = img.astype(np.uint8)
    ours = T.Normalize(MEAN, STD)(T.ToFloat()(arr))
    ref = TV.Normalize(MEAN, STD)(TV.ToTensor()(arr))
    assert torch.equal(ours, ref)
    assert torch.equal(T.ToFloat(scale=False)(arr).tensor, torch.from_numpy(arr).float())
    assert torch.equal(T.Normalize(MEAN, STD)(T.ToChw()(T.ToFloat()(arr))).tensor, ref)


def _png_claiming(width: int, height: int) -> bytes:
    data = encode(pil_image("RGB", (2, 2)), "PNG")
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return data[:8] + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk)) + data[33:]


@pytest.mark.parametrize(("data", "message"), [
    (b"definitely not an image", "not a decodable image"),
    (encode(pil_image("RGB", (40, 23)), "PNG")[:200], "corrupt or truncated PNG image"),
    (_png_claiming(100_000, 100_000), "refused before decoding"),
    (_png_claiming(20_000, 10), "over Decode's limits"),
])
def test_decode_errors(data, message):
    with pytest.raises(ValueError, match=message):
        T.Decode()(data)


def test_decode_alloc_limit_and_types():
    with pytest.raises(ValueError, match="over max_alloc=100"):
        T.Decode(max_alloc=100)(encode(pil_image("RGB", (10, 10)), "PNG"))
    with pytest.raises(TypeError, match="encoded bytes"):
        T.Decode()("a str")


@pytest.mark.parametrize(("transform", "inp", "message"), [
    (T.Normalize(MEAN, STD), np.zeros((2, 2, 3), np.uint8), "apply ToFloat first"),
    (T.Normalize(MEAN, STD), np.zeros((2, 2, 1), np.float32), "3 channel values, the image has 1"),
    (T.ToFloat(), np.zeros((2, 2, 3), np.float32), "ToFloat takes uint8"),
    (T.Resize(4), np.zeros((2, 2, 3), np.float32), "resize before ToFloat"),
    (T.ToRgb(), np.zeros((2, 2, 3), np.float32), "ToRgb takes uint8"),
    (T.Pad(5, padding_mode="reflect"), np.zeros((2, 2, 3), np.uint8), "reflect padding"),
])
def test_transform_given_an_input_it_does_not_take(transform, inp, message):
    with pytest.raises(ValueError, match=message):
        transform(inp)


def test_image_from_array():
    arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    assert T.Image.from_array(arr).shape == (4, 2, 3)
    assert T.Image.from_array(torch.from_numpy(arr).permute(2, 0, 1)).shape == (4, 2, 3)
    assert T.Image.from_array(torch.from_numpy(arr), layout="hwc").shape == (4, 2, 3)
    assert T.Image.from_array(np.zeros((5, 6), np.float32)).shape == (1, 5, 6)
    image = T.Image.from_array(arr)
    assert image.memory_layout == "hwc" and np.array_equal(hwc(image), arr)
    view = hwc(image)
    view[0, 0, 0] = 99
    assert image.tensor[0, 0, 0] == 99 and torch.from_dlpack(image).data_ptr() == image.tensor.data_ptr()
    assert np.asarray(image).shape == (4, 2, 3) and np.asarray(image)[0, 0, 0] == 99
    with pytest.raises(TypeError, match="uint8 or float32, got float64"):
        T.Image.from_array(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="1-4 channels, got 5"):
        T.Image.from_array(np.zeros((2, 2, 5), np.uint8))
    with pytest.raises(ValueError, match="2-D or 3-D"):
        T.Image.from_array(np.zeros((2,), np.uint8))


def _jpeg_claiming(width: int, height: int) -> bytes:
    data = bytearray(encode(pil_image("RGB", (8, 8)), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


@pytest.mark.parametrize(("data", "message"), [
    (encode(pil_image("RGB", (40, 23)), "JPEG")[:300], "corrupt or truncated JPEG image"),
    (_jpeg_claiming(60_000, 60_000), "over Decode's limits"),
    (_jpeg_claiming(9_000, 9_000), "over max_alloc"),
])
def test_jpeg_errors_from_the_header_and_the_decoder(data, message):
    with pytest.raises(ValueError, match=message):
        T.Decode(max_alloc=100 * 2**20)(data)


def test_cmyk_jpeg_becomes_rgb_like_pillow():
    data = encode(pil_image("RGB", (17, 9)).convert("CMYK"), "JPEG")
    out = hwc(T.Decode()(data))
    assert out.shape == (9, 17, 3)
    assert np.abs(out.astype(int) - pil_decoded(data).astype(int)).max() <= 3


@pytest.mark.parametrize("pad", [T.PadTo(32, 30, fill=9, anchor="center"), T.PadTo(19, 40, fill=250), None])
@pytest.mark.parametrize("memory", ["hwc", "chw"])
def test_fused_pad_float_normalize_chw_equals_the_steps_one_by_one(pad, memory):
    image = T.Image.from_array(np.random.default_rng(2).integers(0, 256, (23, 17, 3), dtype=np.uint8))
    image = T.ToChw()(image) if memory == "chw" else image
    steps = ([pad] if pad else []) + [T.ToFloat(), T.Normalize(MEAN, STD), T.ToChw()]
    expected = image
    for step in steps:  # each on its own: no fusing
        expected = step(expected)
    fused = T.Compose(steps)
    assert type(fused._steps[0].__self__).__name__ == "FloatNormalizeChw"
    assert torch.equal(fused(image).as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
