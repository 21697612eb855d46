"""ImageCollator and transforms on the loader's workers."""

from __future__ import annotations

import gc
import io

import numpy as np
import pytest
import torch
from PIL import Image as P

from torch_drt import ImageCollator, StatefulDataLoader
from torch_drt import transforms as T


def images(n, shape=(4, 5, 3), dtype=np.uint8):
    return [np.full(shape, i, dtype=dtype) for i in range(n)]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_one_contiguous_buffer_in_either_layout(layout):
    batch = ImageCollator(layout=layout)(images(3))
    expected = np.stack(images(3))  # NHWC
    assert batch.shape == (3, 3, 4, 5) and batch.memory_layout == layout
    assert np.array_equal(np.asarray(batch), expected.transpose(0, 3, 1, 2))
    in_memory = expected if layout == "NHWC" else expected.transpose(0, 3, 1, 2)
    assert batch.tensor.is_contiguous() and np.array_equal(batch.tensor.numpy(), in_memory)


def test_views_are_writable_and_share_the_buffer():
    batch = ImageCollator()(images(2))
    t = torch.from_dlpack(batch)
    a = np.asarray(batch)
    assert t.data_ptr() == batch.tensor.data_ptr() == a.ctypes.data
    t[0, 0, 0, 0] = 77
    assert a[0, 0, 0, 0] == 77


def test_a_buffer_taken_is_not_handed_out_again_before_its_batch_exists():
    """Two loader threads collating at once: the second ``take`` must not see the first's buffer as free in the
    moment before the first wraps it in its batch (both would write into one buffer: silently wrong batches)."""
    pool = ImageCollator(buffers=4)._pool
    first = pool.take((2, 3, 4, 4), torch.uint8)
    second = pool.take((2, 3, 4, 4), torch.uint8)
    assert first.untyped_storage().data_ptr() != second.untyped_storage().data_ptr()
    del first, second
    again = pool.take((2, 3, 4, 4), torch.uint8)  # free again once nothing holds them
    assert again.untyped_storage().data_ptr() in {b.untyped_storage().data_ptr() for b in pool._buffers}


def test_threads_collating_at_once_never_share_a_buffer():
    import threading

    collate = ImageCollator(buffers=4)
    failures = []

    def work(value: int) -> None:
        items = [np.full((8, 8, 3), value, np.uint8)] * 4
        for _ in range(300):
            batch = collate(items)
            if not bool((batch == value).all()):
                failures.append(value)
            del batch

    threads = [threading.Thread(target=work, args=(v,)) for v in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_buffers_are_reused_only_when_no_view_is_alive():
    collate = ImageCollator(buffers=1)
    first = collate(images(2))
    ptr = first.tensor.data_ptr()
    view = torch.from_dlpack(first)
    del first
    gc.collect()
    second = collate(images(2))
    assert second.tensor.data_ptr() != ptr  # the first buffer still has a live view
    assert int(view[1, 0, 0, 0]) == 1  # and it was not overwritten
    del view, second
    gc.collect()
    third = collate(images(2))
    assert third.tensor.data_ptr() == ptr  # no view is alive any more: the pool's one buffer is handed out again


def test_buffer_reuse_after_drop():
    collate = ImageCollator(buffers=2)
    b = collate(images(2))
    ptr = b.tensor.data_ptr()
    del b
    gc.collect()
    assert collate(images(2)).tensor.data_ptr() == ptr


def test_pairs_give_batch_and_collated_targets():
    batch, labels = ImageCollator()([(im, k % 2) for k, im in enumerate(images(3))])
    assert batch.shape == (3, 3, 4, 5) and labels.dtype == torch.int64 and labels.tolist() == [0, 1, 0]
    batch, extras = ImageCollator()([(im, {"i": k, "name": f"n{k}"}) for k, im in enumerate(images(3))])
    assert extras["i"].tolist() == [0, 1, 2] and extras["name"] == ["n0", "n1", "n2"]
    batch, labels, weights = ImageCollator()([(im, k, k / 2) for k, im in enumerate(images(3))])
    assert labels.tolist() == [0, 1, 2] and weights.dtype == torch.float64 and weights.tolist() == [0, 0.5, 1]
    with pytest.raises(ValueError, match="all be 2-tuples"):
        ImageCollator()([(images(1)[0], 1), images(1)[0]])


@pytest.mark.parametrize(("items", "kwargs", "message"), [
    (images(1) + images(1, shape=(4, 6, 3)), {}, "must share shape and type"),
    (images(2, dtype=np.float32), {"dtype": "uint8"}, "dtype='uint8'"),
])
def test_collator_errors(items, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ImageCollator(**kwargs)(items)


def test_a_padded_ranks_empty_batch_collates_to_an_empty_list_as_the_loaders_default():
    """With ``drop_last=False`` the last global batch is padded and the padding removed: a rank may get no items
    (the loader calls ``collate_fn([])`` so every rank takes the same number of steps)."""
    from torch_drt import StatefulDataLoader

    ranks = [list(StatefulDataLoader(images(5), batch_size=2, collate_fn=ImageCollator(), rank=r, world_size=2))
             for r in range(2)]
    assert [len(r) for r in ranks] == [2, 2]
    assert ranks[0][1].shape[0] == 1 and ranks[1][1] == []
    assert ImageCollator()([]) == []


def png(i: int, size=(9, 7)) -> bytes:
    buf = io.BytesIO()
    P.fromarray(np.full((size[1], size[0], 3), i, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


PIPELINE = T.Compose([T.Decode(), T.ToRgb(), T.PadTo(12, 12), T.ToFloat(), T.Normalize([0.5] * 3, [0.25] * 3),
                      T.ToChw()])


@pytest.mark.parametrize("kwargs", [{"num_workers": 2}, {"num_workers": 2, "item_concurrency": 3},
                                    {"num_workers": 2, "worker_method": "process"}])
def test_compose_as_loader_transform_and_bad_images_fail_only_their_batch(kwargs):
    data = [png(i) for i in range(8)]
    data[3] = b"broken"
    loader = StatefulDataLoader(data, batch_size=2, transform=PIPELINE, collate_fn=ImageCollator(buffers=4),
                                **kwargs)
    it = iter(loader)
    first = next(it)
    expected = (torch.zeros(3, 12, 12) - 0.5) / 0.25
    expected[:, :7, :9] = (1 / 255 - 0.5) / 0.25
    assert first.shape == (2, 3, 12, 12) and torch.allclose(torch.from_dlpack(first)[1], expected)
    with pytest.raises(ValueError, match="not a decodable image"):
        next(it)
    assert [b.shape[0] for b in it] == [2, 2]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("memory", ["chw", "hwc", "float"])
def test_normalize_gives_tofloat_then_normalize_bit_for_bit(layout, memory):
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    rng = np.random.default_rng(1)
    arrays = [rng.integers(0, 256, (33, 21, 3), dtype=np.uint8) for _ in range(4)]
    arrays[0][:] = np.resize(np.arange(256, dtype=np.uint8), (33, 21, 3))  # every value in every channel
    items = [T.Image.from_array(a) for a in arrays]  # HWC memory
    if memory == "chw":
        items = [T.ToChw()(im) for im in items]
    elif memory == "float":
        items = [T.ToFloat()(im) for im in items]
    batch = ImageCollator(layout=layout, normalize=(mean, std), buffers=2)(items)
    to_float, normalize = T.ToFloat(), T.Normalize(mean, std)
    expected = torch.stack([normalize(im if memory == "float" else to_float(im)).as_subclass(torch.Tensor)
                            for im in items])
    assert batch.dtype == torch.float32 and batch.memory_layout == layout
    assert torch.equal(batch.as_subclass(torch.Tensor), expected)
