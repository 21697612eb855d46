"""dataloader-rs users' programs, written from its README (0.2 / 0.3) with its names, run through
``torch_drt.compat.dataloader_rs`` (issue 13 items 10 and 11): the one changed line is the import."""

from __future__ import annotations

import asyncio
import gc
import random
import threading
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from http_server import Server
from PIL import Image as PILImage

from torch_drt.compat.dataloader_rs import (
    FileDataset,
    HttpDataset,
    ImageCollator,
    PyAsyncDataset,
    PyDataloader,
    PyDataset,
)
from torch_drt.compat.dataloader_rs import transforms as T


class Rows(PyDataset):
    """The README's ``Rows``: a table read item by item or a batch at a time; counts what it is asked."""

    def __init__(self, table: np.ndarray, batched: bool = True) -> None:
        super().__init__()
        self.table = table
        self.calls: Counter = Counter()
        self._lock = threading.Lock()
        if not batched:
            self.__getitems__ = None  # off, as in PyTorch

    def __len__(self) -> int:
        with self._lock:
            self.calls["__len__"] += 1
        return len(self.table)

    def __getitem__(self, index: int) -> np.ndarray:
        with self._lock:
            self.calls["__getitem__"] += 1
        return self.table[index]

    def __getitems__(self, indices: list[int]) -> list[np.ndarray]:
        with self._lock:
            self.calls["__getitems__"] += 1
        return list(self.table[indices])


def table(n: int) -> np.ndarray:
    return np.arange(n * 2, dtype=np.int64).reshape(n, 2)


def rows_of(batches) -> list[int]:
    return [int(row[0]) // 2 for batch in batches for row in batch]


def test_quick_start_program(tmp_path):
    paths = []
    for i in range(10):
        np.save(tmp_path / f"{i}.npy", np.full((3, 2), i, dtype=np.float32))
        paths.append(str(tmp_path / f"{i}.npy"))

    class Images(PyDataset):
        def __init__(self, paths: list[str]) -> None:
            super().__init__()
            self.paths = paths

        def __len__(self) -> int:
            return len(self.paths)

        def __getitem__(self, index: int) -> np.ndarray:
            return np.load(self.paths[index])

    def make():
        return PyDataloader(
            Images(paths),
            batch_size=4,
            shuffle=True,
            seed=0,
            num_workers=4,
            prefetch_depth=4,
            collate_fn=np.stack,
            drop_last=True,
        )

    loader = make()
    assert len(loader) == 2
    epochs = []
    for _ in range(3):
        batches = list(loader)  # iterating again starts a new epoch
        assert [b.shape for b in batches] == [(4, 3, 2), (4, 3, 2)]
        epochs.append([int(b[j, 0, 0]) for b in batches for j in range(4)])
    assert all(len(set(e)) == 8 for e in epochs)  # 8 distinct items, the last 2 dropped
    assert len({tuple(e) for e in epochs}) == 3  # a new permutation every epoch
    again = make()
    assert [[int(b[j, 0, 0]) for b in again for j in range(4)] for _ in range(3)] == epochs  # same seed, same orders


def test_without_collate_fn_batches_are_plain_lists_while_torch_drts_loader_collates():
    from torch_drt import StatefulDataLoader

    dataset = Rows(table(5))
    batches = list(PyDataloader(dataset, batch_size=2))
    assert [type(b) for b in batches] == [list, list, list]
    assert [[r.tolist() for r in b] for b in batches] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9]]]
    first = next(iter(StatefulDataLoader(Rows(table(5)), batch_size=2)))
    assert isinstance(first, torch.Tensor) and first.tolist() == [[0, 1], [2, 3]]


class TupleRows(Rows):
    def __getitems__(self, indices):
        return tuple(super().__getitems__(indices))


def test_collate_fn_receives_a_list_whatever_getitems_returns():
    """dataloader-rs's ``collate_fn`` takes ``list[sample]``: a ``__getitems__`` tuple still arrives as a list."""
    kinds = list(PyDataloader(TupleRows(table(5)), batch_size=2, collate_fn=lambda b: (type(b), len(b))))
    assert kinds == [(list, 2), (list, 2), (list, 1)]
    assert [type(b) for b in PyDataloader(TupleRows(table(5)), batch_size=2)] == [list, list, list]


def test_lengths_are_read_at_iter_and_len_not_at_construction():
    dataset = Rows(table(6))

    class Sized:
        reads = lens = 0

        def __iter__(self):
            Sized.reads += 1
            return iter([5, 4, 3])

        def __len__(self):
            Sized.lens += 1
            return 3

    loader = PyDataloader(dataset, batch_size=2)
    sampled = PyDataloader(dataset, batch_size=2, sampler=Sized())
    assert dataset.calls["__len__"] == 0 and Sized.reads == Sized.lens == 0
    assert len(loader) == 3 and dataset.calls["__len__"] == 1
    assert len(sampled) == 2 and Sized.lens == 1 and Sized.reads == 0
    iterator = iter(sampled)
    assert Sized.reads == 1  # read whole when the epoch starts
    assert len(iterator) == 2
    assert [r.tolist() for r in next(iterator)] == [[10, 11], [8, 9]]
    assert len(iterator) == 1


def test_drop_last_with_fewer_items_than_a_batch_yields_no_batch():
    loader = PyDataloader(Rows(table(3)), batch_size=4, drop_last=True)
    assert len(loader) == 0
    assert list(loader) == [] and list(loader) == []
    assert list(PyDataloader(Rows(table(0)), batch_size=4)) == []


def test_a_second_iter_does_not_break_the_first():
    loader = PyDataloader(Rows(table(6)), batch_size=2, num_workers=2)
    first = iter(loader)
    head = next(first)
    second = iter(loader)
    assert rows_of([next(second)]) == rows_of([head]) == [0, 1]
    assert rows_of(first) == [2, 3, 4, 5]
    assert rows_of(second) == [2, 3, 4, 5]
    assert rows_of(loader) == list(range(6))

    shuffled = PyDataloader(Rows(table(6)), batch_size=2, shuffle=True, seed=3)
    a, b = iter(shuffled), iter(shuffled)  # epochs 0 and 1, at once
    orders = [rows_of(a), rows_of(b), rows_of(shuffled)]
    assert all(sorted(o) == list(range(6)) for o in orders)
    alone = PyDataloader(Rows(table(6)), batch_size=2, shuffle=True, seed=3)
    assert [rows_of(alone) for _ in range(3)] == orders  # the same epochs as one after the other


def test_shuffled_epochs_are_torch_drts_keyed_permutation():
    from torch_drt import StatefulDataLoader

    ours = PyDataloader(Rows(table(11)), batch_size=3, shuffle=True, seed=42)
    theirs = StatefulDataLoader(Rows(table(11)), batch_size=3, shuffle=True, seed=42, collate_fn=list)
    for _ in range(3):
        assert rows_of(ours) == rows_of(theirs)


def test_getitems_is_one_call_per_batch_only_without_item_concurrency():
    dataset = Rows(table(8))
    assert rows_of(PyDataloader(dataset, batch_size=4)) == list(range(8))
    assert dataset.calls["__getitems__"] == 2 and dataset.calls["__getitem__"] == 0
    dataset = Rows(table(8))
    assert rows_of(PyDataloader(dataset, batch_size=4, item_concurrency=2)) == list(range(8))
    assert dataset.calls["__getitems__"] == 0 and dataset.calls["__getitem__"] == 8
    dataset = Rows(table(8), batched=False)
    assert rows_of(PyDataloader(dataset, batch_size=4)) == list(range(8))
    assert dataset.calls["__getitem__"] == 8


def test_getitems_with_a_wrong_number_of_samples_is_a_value_error():
    class Short(Rows):
        def __getitems__(self, indices):
            return [self.table[i] for i in indices[:-1]]

    with pytest.raises(ValueError, match="3 items for 4 indices"):
        list(PyDataloader(Short(table(8)), batch_size=4))


def test_item_concurrency_fetches_the_items_of_a_batch_at_once():
    barrier = threading.Barrier(4)

    class Together(PyDataset):
        def __len__(self):
            return 8

        def __getitem__(self, index):
            barrier.wait(timeout=30)  # only passes when 4 items are fetched at once
            return index

    assert list(PyDataloader(Together(), batch_size=4, item_concurrency=4)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert list(PyDataloader(Together(), batch_size=2, num_workers=2, item_concurrency=2)) == [
        [0, 1],
        [2, 3],
        [4, 5],
        [6, 7],
    ]


def test_items_in_parallel_is_the_deprecated_name():
    with pytest.warns(DeprecationWarning, match="item_concurrency"):
        loader = PyDataloader(Rows(table(4)), batch_size=2, items_in_parallel=2)
    assert loader.item_concurrency == 2


def test_transform_gets_the_drawn_index_and_one_argument_callables_are_wrapped():
    seen = []

    def tag(index, sample):
        seen.append(index)
        return (int(sample[0]), index)

    batches = list(PyDataloader(Rows(table(6)), batch_size=3, shuffle=True, seed=1, transform=tag))
    for batch in batches:
        assert all(value == 2 * index for value, index in batch)
    assert sorted(seen) == list(range(6))

    class Compose:  # torchvision's Compose takes the sample only
        def __call__(self, x):
            return int(x.sum())

    assert list(PyDataloader(Rows(table(2)), batch_size=2, transform=Compose())) == [[1, 5]]


def test_return_indices_gives_the_sampler_order():
    loader = PyDataloader(Rows(table(6)), batch_size=2, sampler=[5, 0, 3], return_indices=True)
    got = [(rows_of([batch]), indices) for batch, indices in loader]
    assert got == [([5, 0], [5, 0]), ([3], [3])]
    assert all(type(i) is int for _, indices in loader for i in indices)


def test_the_readmes_weighted_sampler_and_other_iterables():
    class Weighted:
        def __init__(self, weights: list[float]) -> None:
            self.weights = weights

        def __len__(self) -> int:
            return len(self.weights)

        def __iter__(self):
            population = range(len(self.weights))
            yield from random.choices(population, weights=self.weights, k=len(self.weights))

    loader = PyDataloader(Rows(table(5)), batch_size=2, sampler=Weighted([0, 0, 1, 0, 0]))
    assert len(loader) == 3 and rows_of(loader) == [2] * 5
    assert rows_of(PyDataloader(Rows(table(5)), batch_size=2, sampler=range(3))) == [0, 1, 2]
    unsized = PyDataloader(Rows(table(5)), batch_size=2, sampler=(i for i in [4, 1]))
    with pytest.raises(TypeError, match="no len"):
        len(unsized)
    assert rows_of(unsized) == [4, 1]
    assert rows_of(unsized) == []  # a generator is read once: its second epoch is empty
    assert rows_of(PyDataloader(Rows(table(5)), sampler=np.array([3, 1], dtype=np.uint8))) == [3, 1]


@pytest.mark.parametrize(
    ("items", "error", "match"),
    [
        ([1, -1], ValueError, r"sampler item 1 is -1"),
        ([1, 6], ValueError, r"sampler item 1 is 6: indices must be in \[0, 6\)"),
        ([1, 2**70], ValueError, r"sampler item 1"),
        ([1, "a"], TypeError, r"sampler item 1 is 'a' \(str\)"),
        ([1, 2.0], TypeError, r"sampler item 1 is 2.0 \(float\)"),
        ([None], TypeError, r"sampler item 0 is None"),
    ],
)
def test_a_bad_sampler_item_makes_iter_raise(items, error, match):
    dataset = Rows(table(6))
    loader = PyDataloader(dataset, batch_size=2, sampler=items)
    with pytest.raises(error, match=match):
        iter(loader)
    assert dataset.calls["__getitem__"] + dataset.calls["__getitems__"] == 0  # never a short epoch


def test_a_sampler_or_len_that_raises_makes_iter_raise():
    class Broken:
        def __iter__(self):
            raise KeyError("sampler")

    with pytest.raises(KeyError, match="sampler"):
        iter(PyDataloader(Rows(table(4)), sampler=Broken()))

    class BadLen(PyDataset):
        def __len__(self):
            raise OSError("len")

        def __getitem__(self, index):
            return index

    loader = PyDataloader(BadLen())  # constructing does not call __len__
    with pytest.raises(OSError, match="len"):
        iter(loader)


def test_errors_keep_their_type_and_the_next_batch_follows():
    class Flaky(PyDataset):
        def __len__(self):
            return 6

        def __getitem__(self, index):
            if index == 2:
                raise KeyError(f"no item {index}")
            return index

    for workers in (0, 2):
        iterator = iter(PyDataloader(Flaky(), batch_size=2, num_workers=workers))
        assert next(iterator) == [0, 1]
        with pytest.raises(KeyError, match="no item 2"):
            next(iterator)
        assert len(iterator) == 1
        assert next(iterator) == [4, 5]
        with pytest.raises(StopIteration):
            next(iterator)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"prefetch_depth": 0}, ValueError, "prefetch_depth"),
        ({"item_concurrency": 0}, ValueError, "item_concurrency"),
        ({"shuffle": True, "sampler": [0]}, ValueError, "mutually exclusive"),
        ({"seed": 1}, ValueError, "seed only applies when shuffle=True"),
        ({"sampler": 5}, TypeError, "not iterable"),
        ({"batch_size": 2.0}, TypeError, "batch_size must be an int"),
        ({"shuffle": 1}, TypeError, "shuffle must be a bool"),
        ({"runtime_threads": 2}, ValueError, "runtime_threads applies to async"),
        ({"collate_fn": 3}, TypeError, "collate_fn must be callable"),
    ],
)
def test_invalid_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        PyDataloader(Rows(table(4)), **kwargs)


def test_dataset_checks_when_the_loader_is_built():
    class AsyncOnSync(PyDataset):
        def __len__(self):
            return 1

        async def __getitem__(self, index):
            return index

    class SyncOnAsync(PyAsyncDataset):
        def __len__(self):
            return 1

        def __getitem__(self, index):
            return index

    class PlainAclose(PyAsyncDataset):
        def __len__(self):
            return 1

        async def __getitem__(self, index):
            return index

        def aclose(self):
            pass

    class Both(PyDataset, PyAsyncDataset):
        def __len__(self):
            return 1

        def __getitem__(self, index):
            return index

    class NoLen(PyDataset):
        def __getitem__(self, index):
            return index

    for cls, match in [
        (AsyncOnSync, "async def' on a PyDataset"),
        (SyncOnAsync, "must be 'async def'"),
        (PlainAclose, "aclose must be 'async def'"),
        (Both, "both PyDataset and PyAsyncDataset"),
        (NoLen, "no __len__"),
    ]:
        with pytest.raises(TypeError, match=match):
            PyDataloader(cls())

    class ForgotAwait(PyDataset):
        def __len__(self):
            return 2

        def __getitem__(self, index):
            return asyncio.sleep(0, index)  # a coroutine from a plain method

    with pytest.raises(TypeError, match="returned a coroutine"):
        list(PyDataloader(ForgotAwait()))


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


def test_the_readmes_async_dataset_with_aiohttp(server):
    import aiohttp

    closed = []

    class Tiles(PyAsyncDataset):
        def __init__(self, urls: list[str]) -> None:
            super().__init__()
            self.urls = urls
            self.session = None

        def __len__(self) -> int:
            return len(self.urls)

        async def __getitem__(self, index: int) -> bytes:
            if self.session is None:  # created on the loader's event loop
                self.session = aiohttp.ClientSession()
            async with self.session.get(self.urls[index]) as response:
                return await response.read()

        async def aclose(self) -> None:  # awaited on the loader's loop when it is dropped
            closed.append(True)
            if self.session is not None:
                await self.session.close()

    urls = [server.url(f"/item/{i}?size=3") for i in range(10)]
    loader = PyDataloader(Tiles(urls), batch_size=4, num_workers=2, item_concurrency=4, runtime_threads=2)
    for _ in range(2):  # one event loop for the loader's lifetime: the session serves both epochs
        assert [b for batch in loader for b in batch] == [bytes([i]) * 3 for i in range(10)]
    assert closed == []
    loader.close()
    assert closed == [True]
    dropped = PyDataloader(Tiles(urls[:2]), batch_size=2)
    assert next(iter(dropped)) == [b"\x00" * 3, b"\x01" * 3]
    del dropped  # dropping the loader awaits aclose() too
    gc.collect()
    assert closed == [True, True]


def test_async_getitems_is_used_when_item_concurrency_is_one():
    calls = Counter()

    class Batched(PyAsyncDataset):
        def __len__(self):
            return 6

        async def __getitem__(self, index):
            calls["__getitem__"] += 1
            return index

        async def __getitems__(self, indices):
            calls["__getitems__"] += 1
            return [i * 10 for i in indices]

    assert list(PyDataloader(Batched(), batch_size=3)) == [[0, 10, 20], [30, 40, 50]]
    assert calls == {"__getitems__": 2}
    calls.clear()
    assert list(PyDataloader(Batched(), batch_size=3, item_concurrency=3)) == [[0, 1, 2], [3, 4, 5]]
    assert calls == {"__getitem__": 6}


def test_http_dataset_from_template_with_return_indices(server):
    coords = np.array([[0, 1], [2, 3], [4, 5]])
    tiles = HttpDataset.from_template(
        server.url("/item/{x}?size={y}"), {"x": coords[:, 0], "y": coords[:, 1]}, retries=5
    )
    loader = PyDataloader(tiles, batch_size=2, num_workers=2, item_concurrency=2, return_indices=True)
    got = [(batch, indices) for batch, indices in loader]
    assert got == [([b"\x00", b"\x02" * 3], [0, 1]), ([b"\x04" * 5], [2])]
    assert coords[got[0][1]].tolist() == [[0, 1], [2, 3]]


def _png(path, size, value):
    PILImage.fromarray(np.full((size[1], size[0], 3), value, dtype=np.uint8)).save(path)


def test_the_readmes_rust_transforms_and_image_collator(tmp_path):
    paths = []
    for i, size in enumerate([(6, 5), (8, 8), (3, 7)]):
        paths.append(str(tmp_path / f"{i}.png"))
        _png(paths[-1], size, 40 * (i + 1))
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    tiles = T.Compose([T.Decode(), T.ToRgb(), T.PadTo(8, 8), T.ToFloat(), T.Normalize(mean, std), T.ToChw()])
    loader = PyDataloader(
        FileDataset(paths),
        batch_size=3,
        num_workers=2,
        item_concurrency=2,
        transform=tiles,
        collate_fn=ImageCollator(buffers=2),
    )
    (batch,) = list(loader)
    x = torch.from_dlpack(batch)
    assert tuple(x.shape) == (3, 3, 8, 8)
    for i, path in enumerate(paths):  # Pillow decoding, padding right and bottom, ToTensor and Normalize
        rgb = np.asarray(PILImage.open(path).convert("RGB"))
        padded = np.zeros((8, 8, 3), dtype=np.uint8)
        padded[: rgb.shape[0], : rgb.shape[1]] = rgb
        expected = ((padded.astype(np.float32) / 255 - np.float32(mean)) / np.float32(std)).transpose(2, 0, 1)
        np.testing.assert_allclose(x[i].numpy(), expected, rtol=0, atol=1e-6)



def test_a_python_transform_mixing_rust_steps_and_image_from_array(tmp_path):
    paths = [str(tmp_path / f"{i}.png") for i in range(2)]
    for i, path in enumerate(paths):
        _png(path, (4, 4), 10 * i)
    decode = T.Compose([T.Decode(), T.ToRgb(), T.PadTo(4, 4)])
    normalize = T.Compose([T.ToFloat(), T.Normalize([0.5] * 3, [0.5] * 3)])

    def transform(i, png):
        chw = torch.from_dlpack(decode(png)).permute(2, 0, 1)
        return normalize(T.Image.from_array(chw.flip(-1), layout="chw")), i

    loader = PyDataloader(FileDataset(paths), batch_size=2, transform=transform, collate_fn=ImageCollator())
    batch, meta = next(iter(loader))
    assert meta == [0, 1] and tuple(np.asarray(batch).shape) == (2, 3, 4, 4)  # NCHW by default
    np.testing.assert_allclose(np.asarray(batch)[1], (10 / 255 - 0.5) / 0.5, atol=1e-6)


def test_no_warnings_on_a_plain_program():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(PyDataloader(Rows(table(2)), batch_size=2, num_workers=1)) != []


class Gated(PyDataset):
    """Items from ``open_from`` on wait for ``gate``; records the threads that fetch."""

    def __init__(self, n: int, open_from: int) -> None:
        super().__init__()
        self.n, self.open_from = n, open_from
        self.gate, self.asked = threading.Event(), threading.Event()
        self.threads: set[threading.Thread] = set()  # the objects: a new thread may reuse an old one's ident

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        self.threads.add(threading.current_thread())
        if index >= self.open_from:
            self.asked.set()
            self.gate.wait(timeout=30)
        return index


def test_the_readmes_thread_rules_ctrl_c_and_fork(sigint_raises):
    import os
    import signal

    dataset = Gated(6, open_from=0)
    dataset.gate.set()
    loader = PyDataloader(dataset, batch_size=2, num_workers=2)
    list(loader)
    assert rows_or_ids(loader) == list(range(6)) and rows_or_ids(loader) == list(range(6))
    assert 1 <= len(dataset.threads) <= 2  # threads made once, reused: three epochs ran on the same two

    waiting = Gated(4, open_from=2)
    iterator = iter(PyDataloader(waiting, batch_size=2))
    assert next(iterator) == [0, 1]
    errors = []

    def advance():  # a second thread calls next() while this one is inside it, fetching item 2
        waiting.asked.wait(timeout=30)
        try:
            next(iterator)
        except RuntimeError as e:
            errors.append(str(e))
        waiting.gate.set()

    other = threading.Thread(target=advance)
    other.start()
    assert next(iterator) == [2, 3]
    other.join()
    assert len(errors) == 1 and "another thread" in errors[0]

    gated = Gated(6, open_from=2)
    iterator = iter(PyDataloader(gated, batch_size=2, num_workers=1))
    assert next(iterator) == [0, 1]
    with pytest.raises(KeyboardInterrupt):
        interrupt = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        interrupt.start()
        next(iterator)
    interrupt.join()
    gated.gate.set()
    assert next(iterator) == [2, 3]  # the iterator stays usable, nothing lost

    pid = os.fork()  # a child process uses a loader its parent already iterated
    if pid == 0:
        os._exit(0 if rows_or_ids(loader) == list(range(6)) else 3)
    assert os.waitpid(pid, 0)[1] == 0


def rows_or_ids(loader) -> list[int]:
    return [i for batch in loader for i in batch]
