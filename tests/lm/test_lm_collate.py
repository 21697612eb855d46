"""Packed batches against a plain reference: every field of every row, from documents and from a token stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lm_corpora import write_stream
from test_lm_packing import reference_sequence as reference_row  # one reference of what a sequence holds

from torch_drt import StatefulDataLoader
from torch_drt.lm import ArraySource, PackedSequence, PackerNode, collate_packed
from torch_drt.lm.planner import SourcePlanner


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
