"""Packed batches against a plain reference: every field of every row, from documents and from a token stream."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch
from lm_corpora import write_stream
from test_lm_packing import reference_sequence as reference_row  # one reference of what a sequence holds

from torch_drt import StatefulDataLoader
from torch_drt.lm import ArraySource, PackedSequence, PackedWindows, PackerNode, WindowBatch, collate_packed
from torch_drt.lm.planner import SourcePlanner
from torch_drt.storage import TokenStreamDataset
from torch_drt.storage.token_stream import TokenStreamStorage, TokenStreamWriter


def reference_batch(rows, length):
    """``collate_packed``'s documented output, written plainly from reference rows."""
    return {
        "tokens": [r[0] for r in rows],
        "segment_ids": [r[1] for r in rows],
        "positions": [r[2] for r in rows],
        "loss_mask": [[True] * r[3] + [False] * (length - r[3]) for r in rows],
    }


def assert_batch(batch, expected, token_dtype):
    assert list(batch) == ["tokens", "segment_ids", "positions", "loss_mask"]
    dtypes = {"tokens": token_dtype, "segment_ids": torch.int32, "positions": torch.int32, "loss_mask": torch.bool}
    for name, tensor in batch.items():
        assert tensor.dtype == dtypes[name] and tensor.is_contiguous(), name
        assert tensor.tolist() == expected[name], name


@pytest.mark.parametrize("dtype", [np.int32, np.uint16, np.int64])
@pytest.mark.parametrize("method", ["concat", "first_fit", "best_fit"])
def test_document_batches_equal_the_reference(method, dtype):
    rng = np.random.default_rng(31)
    length, batch_size = 24, 7
    sizes = rng.choice([0, 0, 1, 3, 11, 23, 24, 25, 40, 77], 90)  # empty, short, exact, overlong (split)
    docs = [rng.integers(0, 60_000, n).astype(dtype) for n in sizes]
    source = ArraySource.from_documents(docs, dtype=dtype)
    node = PackerNode(source, length, method=method, buffer_size=3, overlong="split", pad_id=7)
    node.reset()
    planner = SourcePlanner(source.lengths(), length, method, 3, "split", False, 0)
    planner.start(0)
    sequences = list(node)
    assert len(sequences) % batch_size  # the last batch is partial
    token_dtype = {np.int32: torch.int32, np.uint16: torch.int32, np.int64: torch.int64}[dtype]
    whole = 0
    for b in range(0, len(sequences), batch_size):
        items = sequences[b : b + batch_size]
        rows = [reference_row(docs, planner.next_plan(), length, 7) for _ in items]
        whole += sum(r[3] == length and r[1] == [1] * length for r in rows)
        assert_batch(collate_packed(items), reference_batch(rows, length), token_dtype)
    assert whole  # the batches hold whole sequences as well as packed ones


@pytest.mark.parametrize("shuffle", [False, True])
def test_stream_batches_equal_the_reference(tmp_path, shuffle):
    tokens = np.random.default_rng(5).integers(0, 1 << 30, 1000).astype(np.int32)
    stream = write_stream(tmp_path, "s", tokens, shard_elements=77)  # windows cross shard edges
    length, batch_size = 32, 6  # 31 full windows, one of 8 tokens
    loader = StatefulDataLoader.from_storage(stream, collate_packed, sequence_length=length, packing="concat",
                                             local_batch_size=batch_size, shuffle=shuffle, shuffle_seed=4,
                                             drop_last=False)
    order = list(loader.sampler) if shuffle else list(range(32))
    docs = [tokens[i * length : (i + 1) * length] for i in range(32)]
    batches = list(loader)
    assert len(batches) == 6 and len(batches[-1]["tokens"]) == 2  # the last batch is partial
    for k, batch in enumerate(batches):
        windows = order[k * batch_size : (k + 1) * batch_size]
        rows = [reference_row(docs, [i, 0, len(docs[i])], length, 0) for i in windows]
        assert_batch(batch, reference_batch(rows, length), torch.int32)


def test_collate_refuses_sequences_of_other_lengths():
    source = ArraySource.from_documents([np.arange(8), np.arange(4)])
    a, b = PackerNode(source, 8), PackerNode(source, 4)
    a.reset()
    b.reset()
    eight, four = next(a), next(b)
    with pytest.raises(ValueError, match=r"lengths \[4, 8\]"):
        collate_packed([eight, four])
    one = PackedSequence.from_pieces([np.arange(1)], 1, 0, np.int64)
    with pytest.raises(ValueError, match=r"lengths \[1, 8\]"):  # a row of 1 must not broadcast into the others
        collate_packed([eight, one])


@pytest.mark.parametrize("dtype", ["<u2", "<i8", ">u2", ">i8"])
@pytest.mark.parametrize("order", ["consecutive", "shuffled", "with the padded window"])
def test_window_batches_collate_as_their_items(tmp_path, dtype, order):
    """collate_packed copies a WindowBatch's tokens from the stream: the batch equals the one of its items, in the
    machine's byte order (torch takes no other) whatever the stream's."""
    tokens = np.random.default_rng(6).integers(0, 60_000, 700).astype(dtype)
    with TokenStreamWriter(tmp_path, "s", dtype, shard_elements=50) as writer:  # windows cross shards
        writer.write(tokens)
    windows = PackedWindows(TokenStreamStorage(tmp_path / "s"), 16)  # 43 full windows, one of 12 tokens
    indices = {"consecutive": [3, 4, 5, 6, 7], "shuffled": [40, 2, 17, 3], "with the padded window": [42, 43]}[order]
    batch = windows.__getitems__(indices)
    assert isinstance(batch, WindowBatch) and len(batch) == len(indices)
    fast = collate_packed(batch)
    slow = collate_packed(list(batch))  # the items themselves
    token_dtype = torch.int32 if dtype[1:] == "u2" else torch.int64
    for name, tensor in fast.items():
        assert tensor.dtype == slow[name].dtype and torch.equal(tensor, slow[name]), name
    assert fast["tokens"].dtype == token_dtype
    expected = [tokens[i * 16 : (i + 1) * 16].tolist() for i in indices]
    expected = [row + [0] * (16 - len(row)) for row in expected]
    assert fast["tokens"].tolist() == expected
    fast["tokens"] += 1  # a fresh, writable buffer: the stream is untouched
    assert collate_packed(windows.__getitems__(indices))["tokens"].tolist() == expected


def test_window_batch_reads_as_the_list_of_its_items(tmp_path):
    """A user's collate sees what torch's DataLoader gives it over the same dataset: the items, in order."""
    stream = write_stream(tmp_path, "s", np.arange(300, dtype=np.int32), shard_elements=64)
    windows = PackedWindows(stream, 16)
    batch = windows.__getitems__([5, 1, 18])
    assert [s.tokens.tolist() for s in batch] == [list(range(i * 16, i * 16 + 16)) for i in (5, 1)] + [
        list(range(288, 300)) + [0] * 4]
    assert batch[-1].num_tokens == 12 and [s.num_tokens for s in batch[:2]] == [16, 16]
    for item in batch:  # arrays of their own: a user's collate may hand them to torch.from_numpy and write
        assert all(array.flags.writeable for array in item)
        for array in item:
            array[...] = 0
    assert windows.__getitems__([5])[0].tokens[:2].tolist() == [80, 81]
    assert windows.__getitems__([1])[0].segment_ids.tolist() == [1] * 16
    batch = windows.__getitems__([5, 1, 18])
    restored = pickle.loads(pickle.dumps(batch))
    assert type(restored) is list and [s.tokens.tolist() for s in restored] == [s.tokens.tolist() for s in batch]
    ours = StatefulDataLoader(windows, batch_size=4, shuffle=True, seed=3, collate_fn=list)
    theirs = torch.utils.data.DataLoader(windows, batch_size=4, sampler=list(ours.sampler), collate_fn=list)
    for a, b in zip(ours, theirs, strict=True):
        assert [s.tokens.tolist() for s in a] == [s.tokens.tolist() for s in b]
        assert [s.segment_ids.tolist() for s in a] == [s.segment_ids.tolist() for s in b]


def test_a_window_batch_keeps_its_own_indices_as_python_ints(tmp_path):
    """The batch reads its windows after ``__getitems__`` returned: a caller reusing its index list must not change
    it, and numpy int32 indices must not overflow ``i * L`` (streams past 2**31 tokens)."""
    stream = write_stream(tmp_path, "s", np.arange(512, dtype=np.int32), shard_elements=100)
    windows = PackedWindows(stream, 16)
    indices = [30, 31]
    batch = windows.__getitems__(indices)
    indices[:] = [0, 1]  # a batch sampler refilling one buffer
    assert collate_packed(batch)["tokens"][:, 0].tolist() == [480, 496]
    batch = windows.__getitems__([np.int32(3), np.uint32(4)])
    assert [type(i) for i in batch.indices] == [int, int] and [s.tokens[0] for s in batch] == [48, 64]


@pytest.mark.parametrize("bad", [[3, 33], [-1, 2], [32]])
def test_windows_outside_the_stream_are_refused_by_index(tmp_path, bad):
    """32 windows of 16 (the last padded): an index outside ``[0, 32)`` is an IndexError naming it, for one item
    and for a batch, as for the stream's plain dataset over the 31 whole windows."""
    stream = write_stream(tmp_path, "s", np.arange(500, dtype=np.int32), shard_elements=100)
    windows, plain = PackedWindows(stream, 16), TokenStreamDataset(stream, 16)
    first_bad = next(i for i in bad if not 0 <= i < 32)
    with pytest.raises(IndexError, match=f"^index {first_bad} is out of range for 32 windows$"):
        windows.__getitems__(bad)
    with pytest.raises(IndexError, match=f"^index {first_bad} is out of range for 32 windows$"):
        windows[first_bad]
    with pytest.raises(IndexError, match=f"^index {first_bad} is out of range for 31 sequences$"):
        plain.__getitems__(bad)
    with pytest.raises(IndexError, match=f"^index {first_bad} is out of range for 31 sequences$"):
        plain[first_bad]
    assert windows[31].num_tokens == 4 and plain[30].tolist() == list(range(480, 496))
    with pytest.raises(IndexError, match=r"^index 31 is out of range for 31 sequences$"):
        plain[31]


@pytest.mark.parametrize("dtype", [">i4", ">u8", "<u8"])
def test_a_stream_of_another_byte_order_or_uint64_gives_torchs_tensors(tmp_path, dtype):
    """Big-endian streams read through torch's default collate as through collate_packed (torch takes only the
    machine's byte order); uint64 tokens become int64, and one of 2**63 or more is an error, not a wrapped id."""
    tokens = np.arange(100, dtype=dtype)
    with TokenStreamWriter(tmp_path, "s", dtype, shard_elements=30) as writer:
        writer.write(tokens)
    storage = TokenStreamStorage(tmp_path / "s")
    plain = torch.utils.data.DataLoader(TokenStreamDataset(storage, 10), batch_size=3)
    assert next(iter(plain)).reshape(-1).tolist() == list(range(30))
    packed = collate_packed(PackedWindows(storage, 10).__getitems__([2, 3]))
    assert packed["tokens"].reshape(-1).tolist() == list(range(20, 40))
    node = PackerNode(storage, 10, method="concat")
    node.reset()
    items = {"window": PackedWindows(storage, 10)[2], "padded window": PackedWindows(storage, 10)[9],
             "window batch item": PackedWindows(storage, 10).__getitems__([2])[0], "packer item": next(node)}
    for name, item in items.items():  # what torch.as_tensor receives without batching
        assert torch.as_tensor(item.tokens)[:2].tolist() in ([20, 21], [90, 91], [0, 1]), name
    assert packed["tokens"].dtype == (torch.int64 if dtype[1:] == "u8" else torch.int32)
    if dtype[1:] == "u8":
        (tmp_path / "big").mkdir()
        with TokenStreamWriter(tmp_path / "big", "s", dtype, shard_elements=30) as writer:
            writer.write(np.array([1 << 63] + [0] * 19, dtype=dtype))
        windows = PackedWindows(TokenStreamStorage(tmp_path / "big" / "s"), 10)
        for batch in (windows.__getitems__([0, 1]), list(windows.__getitems__([0, 1]))):  # whole windows, items
            with pytest.raises(ValueError, match="2\\*\\*63"):
                collate_packed(batch)


BIG_WINDOW, BIG_LENGTH = (1 << 22) + 3, 1024  # window 2**22 + 3 of 1,024 tokens starts past 2**32


def sparse_stream(root):
    """A uint8 stream of 2**32 + 2**20 tokens in a sparse file: zeros, but window ``BIG_WINDOW`` holds 7s."""
    root.mkdir()
    total = (1 << 32) + (1 << 20)
    with open(root / "000000.bin", "wb") as f:
        f.truncate(total)
        f.seek(BIG_WINDOW * BIG_LENGTH)
        f.write(b"\x07" * BIG_LENGTH)
    manifest = {"kind": "token_stream", "version": 1, "dtype": "|u1", "total_elements": total,
                "shards": [{"name": "000000.bin", "elements": total, "sha256": "0" * 64}]}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return TokenStreamStorage(root)


def int32_samplers():
    return {"np.int32": [np.int32(BIG_WINDOW)], "np.uint32": [np.uint32(BIG_WINDOW)],
            "torch.int32": torch.tensor([BIG_WINDOW], dtype=torch.int32)}


def test_windows_past_two_to_the_31_tokens_are_read_where_they_are(tmp_path):
    """An int32 index (a sampler's numpy array) must read its window, not one that ``i * L`` in 32 bits wraps to."""
    windows = PackedWindows(sparse_stream(tmp_path / "big"), BIG_LENGTH)
    for name, sampler in int32_samplers().items():
        loader = torch.utils.data.DataLoader(windows, batch_size=1, sampler=sampler, collate_fn=collate_packed)
        assert next(iter(loader))["tokens"][0, :4].tolist() == [7, 7, 7, 7], name
    with pytest.raises(TypeError):  # a float is no index (it was truncated to one)
        windows.__getitems__([2.7])


def test_token_stream_windows_past_two_to_the_31_tokens_are_read_where_they_are(tmp_path):
    dataset = TokenStreamDataset(sparse_stream(tmp_path / "big"), BIG_LENGTH)
    for name, sampler in int32_samplers().items():
        for batch_size in (None, 1):  # __getitem__ and __getitems__
            loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=np.array)
            first = next(iter(loader))
            assert first.reshape(-1)[:4].tolist() == [7, 7, 7, 7], (name, batch_size)
