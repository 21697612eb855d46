"""torchvision v2 interop: Image and ImageBatch are tv_tensors.Image; labels collate; Compose in the loader hook."""

from __future__ import annotations

import gc
import io
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from PIL import Image as P
from torchvision import tv_tensors
from torchvision.transforms import v2

from torch_drt import ImageCollator, StatefulDataLoader
from torch_drt import transforms as T
from torch_drt.transforms._image import plain


def png(value: int, size=(9, 7)) -> bytes:
    buf = io.BytesIO()
    arr = np.full((size[1], size[0], 3), value, np.uint8)
    arr[0, 0] = (255, 0, value)
    P.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def test_torchvision_transforms_act_on_images():
    image = T.Decode()(png(40))
    assert isinstance(image, tv_tensors.Image) and image.shape == (3, 7, 9)
    flipped = v2.RandomHorizontalFlip(p=1.0)(image)
    assert isinstance(flipped, T.Image) and torch.equal(plain(flipped), plain(image).flip(-1))
    resized = v2.Resize((4, 5))(image)
    assert resized.shape == (3, 4, 5)
    # an explicit image: the label tensor next to it passes through, the image is transformed
    out, label = v2.RandomVerticalFlip(p=1.0)((image, torch.tensor([3, 4])))
    assert torch.equal(plain(out), plain(image).flip(-2)) and label.tolist() == [3, 4]
    # and torch_drt transforms take torchvision's images and plain CHW tensors
    assert torch.equal(plain(T.HFlip()(tv_tensors.Image(plain(image).contiguous()))), plain(flipped))
    assert T.ToFloat()(plain(image).contiguous()).shape == (3, 7, 9)


def test_torchvision_transforms_inside_compose():
    pipeline = T.Compose([T.Decode(), v2.RandomResizedCrop(6), T.RandomHorizontalFlip(), v2.ColorJitter(0.3),
                          T.ToFloat(), T.Normalize([0.5] * 3, [0.2] * 3)])
    out = pipeline(png(100, (30, 20)))
    assert isinstance(out, T.Image) and out.shape == (3, 6, 6) and out.dtype == torch.float32


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_model_takes_a_batch(layout):
    images = [T.ToFloat()(T.Decode()(png(v))) for v in (10, 200)]
    batch = ImageCollator(layout=layout)(images)
    assert isinstance(batch, torch.Tensor) and isinstance(batch, tv_tensors.Image) and batch.shape == (2, 3, 7, 9)
    assert batch.memory_layout == layout
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(140, 2))
    expected = model(torch.stack([plain(i) for i in images]))
    assert torch.allclose(model(batch), expected, atol=1e-6)
    assert torch.equal(plain(v2.RandomHorizontalFlip(p=1.0)(batch)), plain(batch).flip(-1))


def test_image_label_items_through_the_loader_hook():
    data = [(png(i), i % 3) for i in range(8)]
    pipeline = T.Compose([T.Decode(), T.RandomHorizontalFlip(), T.ToFloat(), T.Normalize([0.5] * 3, [0.25] * 3),
                          T.ToChw()])
    loader = StatefulDataLoader(data, batch_size=4, transform=pipeline, collate_fn=ImageCollator(buffers=2))
    batches = list(loader)
    assert len(batches) == 2
    images, labels = batches[0]
    assert images.shape == (4, 3, 7, 9) and labels.dtype == torch.int64 and labels.tolist() == [0, 1, 2, 0]
    assert torch.allclose(plain(images)[1, 1, 3, 3], torch.tensor((1 / 255 - 0.5) / 0.25))


def test_a_torchvision_pipeline_inside_compose_in_the_loader():
    # torchvision's Compose would take the loader's (index, item) for a sample of two; inside a torch_drt Compose
    # it gets the image of each (image, label) item only
    theirs = v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.ToDtype(torch.float32, scale=True)])
    loader = StatefulDataLoader([(png(i), i) for i in range(6)], batch_size=3, collate_fn=ImageCollator(),
                                transform=T.Compose([T.Decode(), theirs]))
    (images, labels), _ = list(loader)
    assert images.dtype == torch.float32 and labels.tolist() == [0, 1, 2]
    assert float(images[0, 0, 0, -1]) == 1.0 and float(images[0, 1, 0, -1]) == 0.0  # the red corner, mirrored


def test_a_batch_sent_to_another_process_gives_its_buffer_up():
    collate = ImageCollator(buffers=1)
    images = [T.Image.from_array(np.full((4, 5, 3), i, np.uint8)) for i in range(2)]
    first = collate(images)
    ptr = first.data_ptr()
    del first
    gc.collect()
    second = collate(images)
    assert second.data_ptr() == ptr  # reused once dropped
    ForkingPickler.dumps(second)  # what a process worker does: torch moves the buffer to shared memory
    shared = second.data_ptr()  # which the receiving process maps: it must never be written here again
    del second
    gc.collect()
    assert collate(images).data_ptr() != shared


def test_images_and_batches_pickle():
    image = T.Decode()(png(7))
    again = pickle.loads(pickle.dumps(image))
    assert type(again) is T.Image and again.memory_layout == "hwc" and torch.equal(plain(again), plain(image))
    batch = ImageCollator(layout="NHWC", buffers=2)([image, image])
    again = pickle.loads(pickle.dumps(batch))
    assert type(again) is T.ImageBatch and again.memory_layout == "NHWC" and torch.equal(plain(again), plain(batch))


def test_reprs_are_readable():
    image = T.Decode()(png(7))
    assert repr(image) == "Image(shape=(3, 7, 9), dtype=torch.uint8, memory_layout='hwc')"
    batch = ImageCollator()([image])
    assert repr(batch) == "ImageBatch(shape=(1, 3, 7, 9), dtype=torch.uint8, memory_layout='NCHW')"
    assert repr(ImageCollator(buffers=8)) == (
        "ImageCollator(layout='NCHW', dtype=None, buffers=8, max_alloc=4294967296)")
    pipeline = T.Compose([T.Decode(), T.RandomApply([T.RandomResizedCrop(224), T.HFlip()], p=0.3),
                          T.ColorJitter(0.4, 0.4), T.Normalize([0.5], [0.2])])
    text = repr(pipeline)
    assert text.startswith(
        "Compose(\n  Decode(max_width=16384, max_height=16384, max_alloc=268435456),\n  RandomApply(\n")
    assert "    RandomResizedCrop(size=(224, 224), scale=(0.08, 1.0), ratio=(0.75, 1.3333333333333333), " in text
    assert "  p=0.3),\n  ColorJitter(brightness=(0.6, 1.4), contrast=(0.6, 1.4), saturation=None, hue=None" in text
    every = [T.Decode(), T.ToRgb(), T.ToRgba(), T.ToGray(), T.Crop(1, 2, 3, 4), T.CenterCrop(5), T.Pad(2),
             T.PadTo(8, 8), T.Resize(8), T.HFlip(), T.VFlip(), T.Rotate90(), T.ToFloat(), T.Normalize([0.1], [0.2]),
             T.ToChw(), T.ToHwc(), T.RandomResizedCrop(8), T.RandomCrop(4, padding=1), T.RandomHorizontalFlip(),
             T.RandomVerticalFlip(), T.ColorJitter(0.1), T.RandomGrayscale(), T.RandomErasing(),
             T.RandomChoice([T.HFlip()]), T.RandomApply([T.HFlip()])]
    for t in every:
        text = repr(t)
        assert text.startswith(type(t).__name__ + "(") and "object at 0x" not in text and "_steps" not in text, text
