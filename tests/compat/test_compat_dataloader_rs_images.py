"""dataloader-rs's image semantics through ``torch_drt.compat.dataloader_rs`` (issue 13 item 10, README "Image
transforms in Rust"): array views in the image's own layout (HWC unless ``ToChw``), ``Image.from_array``,
``ImageCollator`` batches viewed in their layout, while torch_drt's own ``Image`` stays a (C, H, W) tensor."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
import torch
from PIL import Image as PILImage

import torch_drt.transforms as drt_transforms
from torch_drt.compat.dataloader_rs import Image, ImageBatch, ImageCollator
from torch_drt.compat.dataloader_rs import transforms as T


def png(width: int, height: int, mode: str = "RGB", seed: int = 0) -> bytes:
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[mode]
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, channels), dtype=np.uint8)
    out = io.BytesIO()
    PILImage.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode).save(out, format="PNG")
    return out.getvalue()


def pillow(data: bytes, mode: str = "RGB") -> np.ndarray:
    return np.asarray(PILImage.open(io.BytesIO(data)).convert(mode))


def test_a_decoded_image_is_viewed_hwc_read_only_and_chw_after_to_chw():
    data = png(6, 5)
    image = T.Decode()(data)
    assert isinstance(image, Image) and image.layout == "hwc" and image.shape == (5, 6, 3)
    array = np.asarray(image)
    assert array.shape == (5, 6, 3) and array.dtype == np.uint8 and not array.flags.writeable
    np.testing.assert_array_equal(array, pillow(data))
    with pytest.raises(ValueError):
        array[0, 0, 0] = 1
    assert torch.equal(torch.from_dlpack(image), torch.from_numpy(pillow(data).copy()))
    chw = T.ToChw()(image)
    assert chw.layout == "chw" and np.asarray(chw).shape == (3, 5, 6)
    np.testing.assert_array_equal(np.asarray(chw), pillow(data).transpose(2, 0, 1))
    back = T.ToHwc()(chw)
    assert back.layout == "hwc" and np.array_equal(np.asarray(back), pillow(data))
    # torch_drt's own Image is unchanged: a (C, H, W) tensor whose views are CHW
    own = drt_transforms.Decode()(data)
    assert isinstance(own, torch.Tensor) and tuple(np.asarray(own).shape) == (3, 5, 6)
    assert torch.equal(image.tv_tensor, own)


@pytest.mark.parametrize(("mode", "steps", "convert"), [
    ("L", [], "L"),
    ("RGBA", [], "RGBA"),
    ("RGB", ["ToGray"], "L"),
    ("L", ["ToRgb"], "RGB"),
])
def test_one_channel_images_keep_their_channel_axis(mode, steps, convert):
    data = png(4, 3, mode)
    image = T.Compose([T.Decode(), *(getattr(T, s)() for s in steps)])(data)
    expected = pillow(data, convert)
    expected = expected[..., None] if expected.ndim == 2 else expected
    assert image.layout == "hwc" and np.asarray(image).shape == expected.shape
    np.testing.assert_array_equal(np.asarray(image), expected)


def test_transforms_keep_the_layout_and_torch_drts_values():
    data = png(9, 7, seed=3)
    steps = [T.Decode(), T.Resize(4), T.HFlip(), T.PadTo(6, 6), T.Rotate90()]
    image = T.Compose(steps)(data)
    own = drt_transforms.Compose([s.transform for s in steps])(data)
    assert image.layout == "hwc" and image.shape == (6, 6, 3)
    np.testing.assert_array_equal(np.asarray(image), own.hwc.numpy())
    one_by_one = T.Decode()(data)
    for step in steps[1:]:
        one_by_one = step(one_by_one)
    assert np.array_equal(np.asarray(one_by_one), np.asarray(image))
    assert np.array_equal(np.asarray(steps[4](steps[3](T.Resize(4)(T.HFlip()(T.Decode()(data)))))), np.rot90(
        np.asarray(T.PadTo(6, 6)(T.Resize(4)(T.HFlip()(T.Decode()(data)))))))  # numpy.rot90 on HWC


def test_the_readmes_normalize_chain_is_chw_float_as_pillow_and_totensor_give_it():
    data = png(5, 4, seed=1)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    tiles = T.Compose([T.Decode(), T.ToRgb(), T.PadTo(8, 8), T.ToFloat(), T.Normalize(mean, std), T.ToChw()])
    image = tiles(data)
    padded = np.zeros((8, 8, 3), dtype=np.uint8)
    padded[:4, :5] = pillow(data)
    expected = ((padded.astype(np.float32) / 255 - np.float32(mean)) / np.float32(std)).transpose(2, 0, 1)
    assert image.layout == "chw" and image.dtype == np.float32
    np.testing.assert_allclose(np.asarray(image), expected, rtol=0, atol=1e-6)
    hwc = T.Compose([T.Decode(), T.ToFloat(), T.Normalize(mean, std)])(data)  # Normalize keeps HWC
    assert hwc.layout == "hwc" and np.asarray(hwc).shape == (4, 5, 3)


def test_a_python_step_in_a_compose_sees_dataloader_rs_images():
    seen = []

    def peek(image):
        seen.append((type(image), image.layout, np.asarray(image).shape))
        return image

    image = T.Compose([T.Decode(), peek, T.ToChw(), peek])(png(3, 2))
    assert seen == [(Image, "hwc", (2, 3, 3)), (Image, "chw", (3, 2, 3))]
    assert image.layout == "chw"


def test_the_loader_forms_and_tuples_pass_through():
    data = png(3, 2)
    image, meta = T.Decode()(7, (data, "meta"))  # the loader's transform(index, item) with an (image, meta) item
    assert isinstance(image, Image) and meta == "meta"
    with pytest.raises(TypeError, match="takes"):
        T.Decode()(1, 2, 3)
    with pytest.raises(ValueError, match="ToFloat"):
        T.Normalize([0.5] * 3, [0.5] * 3)(image)  # Normalize before ToFloat, as dataloader-rs refuses it


def test_from_array_copies_into_an_hwc_image():
    hwc = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    image = Image.from_array(hwc)
    hwc[0, 0, 0] = 99  # a copy: the image does not change with its source
    assert image.layout == "hwc" and np.asarray(image)[0, 0, 0] == 0
    chw = torch.arange(3 * 4 * 5, dtype=torch.float32).reshape(3, 4, 5)
    from_chw = Image.from_array(chw, layout="chw")
    assert from_chw.layout == "hwc" and np.array_equal(np.asarray(from_chw), chw.permute(1, 2, 0).numpy())
    assert np.asarray(Image.from_array(torch.zeros(4, 5, 3, dtype=torch.uint8))).shape == (4, 5, 3)  # "hwc" default
    assert np.asarray(Image.from_array(np.zeros((4, 5), dtype=np.uint8))).shape == (4, 5, 1)
    again = Image.from_array(T.ToChw()(image), layout="chw")  # an Image is read through its array view
    assert again.layout == "hwc" and np.array_equal(np.asarray(again), np.asarray(image))
    assert np.array_equal(np.asarray(pickle.loads(pickle.dumps(image))), np.asarray(image))
    assert np.asarray(Image.from_array(memoryview(bytes(24)).cast("B", (2, 4, 3)))).shape == (2, 4, 3)
    for bad, error in [
        (np.zeros((4, 5, 3), dtype=np.float64), TypeError),
        (np.zeros((4, 5, 2), dtype=np.uint8), ValueError),
        (np.zeros((4, 5, 5), dtype=np.uint8), ValueError),
        (np.zeros((2, 4, 5, 3), dtype=np.uint8), ValueError),
        (np.zeros((16385, 1, 1), dtype=np.uint8), ValueError),
    ]:
        with pytest.raises(error):
            Image.from_array(bad)
    with pytest.raises(ValueError, match="layout"):
        Image.from_array(hwc, layout="whc")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_image_collator_batches_are_writable_views_in_their_layout(layout):
    images = [T.Decode()(png(5, 4, seed=s)) for s in range(3)]
    batch = ImageCollator(layout=layout)(images)
    assert isinstance(batch, ImageBatch) and batch.layout == layout and len(batch) == 3
    stacked = np.stack([np.asarray(i) for i in images])  # N, H, W, C
    expected = stacked if layout == "NHWC" else stacked.transpose(0, 3, 1, 2)
    array = np.asarray(batch)
    assert array.shape == expected.shape == batch.shape and array.flags.writeable
    np.testing.assert_array_equal(array, expected)
    view = torch.from_dlpack(batch)
    array[0, 0, 0, 0] = 255 - array[0, 0, 0, 0]  # one buffer: the write shows through the other view
    assert int(view[0, 0, 0, 0]) == int(array[0, 0, 0, 0])
    assert tuple(batch.tv_tensor.shape) == (3, 3, 4, 5)  # torch_drt's (N, C, H, W) batch over the same buffer


def test_image_collator_tuples_dtype_and_shapes():
    images = [T.Decode()(png(4, 4, seed=s)) for s in range(2)]
    batch, coords = ImageCollator()([(images[0], (0, 1)), (images[1], (2, 3))])
    assert coords == [(0, 1), (2, 3)] and batch.shape == (2, 3, 4, 4)  # metadata as a plain list
    batch, names, ids = ImageCollator()([(images[0], "a", 1), (images[1], "b", 2)])
    assert (names, ids) == (["a", "b"], [1, 2])
    with pytest.raises(ValueError, match="float32"):
        ImageCollator(dtype="float32")(images)
    with pytest.raises(ValueError, match="shape"):
        ImageCollator()([images[0], T.Decode()(png(5, 4))])
    with pytest.raises(ValueError):
        ImageCollator()([])


def test_a_batch_keeps_its_buffer_until_every_view_is_gone():
    images = [T.Decode()(png(4, 4, seed=s)) for s in range(2)]
    collate = ImageCollator(buffers=1)
    first = collate(images)
    address = np.asarray(first).ctypes.data
    del first
    second = collate(images)
    assert np.asarray(second).ctypes.data == address  # the dropped batch's buffer is reused
    held = np.asarray(second)
    del second
    third = collate(images)
    assert np.asarray(third).ctypes.data != address  # a live view keeps the buffer out of reuse
    np.testing.assert_array_equal(held, np.asarray(third))


def test_transforms_pickle_and_read_as_torch_drts():
    tiles = T.Compose([T.Decode(), T.Resize(4), T.ToFloat(), T.Normalize([0.5] * 3, [0.5] * 3), T.ToChw()])
    again = pickle.loads(pickle.dumps(tiles))
    data = png(6, 6)
    assert np.array_equal(np.asarray(again(data)), np.asarray(tiles(data)))
    assert repr(tiles) == repr(drt_transforms.Compose([t.transform for t in tiles.transforms]))
    assert repr(T.Decode()) == repr(drt_transforms.Decode())


def test_every_torch_drt_transform_has_its_dataloader_rs_form():
    names = {n for n in drt_transforms.__all__ if n != "Transform"}
    assert names <= set(T.__all__)
    for name in names - {"Image", "ImageBatch", "ImageCollator", "MAX_ALLOC", "MAX_BATCH_ALLOC", "MAX_SIDE"}:
        assert getattr(T, name).wrapped is getattr(drt_transforms, name)
