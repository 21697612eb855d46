"""Packing through StatefulDataLoader.from_storage and collate_packed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lm_corpora import L, documents, write_documents, write_stream

from torch_drt import StatefulDataLoader
from torch_drt.lm import PackedSequence, collate_packed


@pytest.fixture
def storage(tmp_path):
    return write_documents(tmp_path, "docs", documents(150, 8, 0, max_len=200))


def real_tokens(batches):
    return np.concatenate([b["tokens"][b["loss_mask"]].numpy() for b in batches])


def test_documents_packed_shuffled_every_token_once(storage):
    loader = StatefulDataLoader.from_storage(storage, collate_packed, sequence_length=L, packing="best_fit",
                                             local_batch_size=4, num_workers=2, shuffle=True, shuffle_seed=3,
                                             drop_last=False)
    batches = list(loader)
    assert batches[0]["tokens"].shape == (4, L) and batches[0]["segment_ids"].dtype == torch.int32
    got = real_tokens(batches)
    assert sorted(got.tolist()) == np.concatenate(documents(150, 8, 0, max_len=200)).tolist()
    assert len(got) == len(set(got.tolist()))
    assert real_tokens(list(loader)).tolist() != got.tolist()  # the next epoch is shuffled anew


def test_resume_with_another_batch_size_workers_and_ranks(storage):
    kw = {"sequence_length": L, "packing": {"method": "first_fit", "buffer_size": 4}, "shuffle": True,
          "shuffle_seed": 1, "drop_last": False}
    whole = real_tokens(list(StatefulDataLoader.from_storage(storage, collate_packed, local_batch_size=6, **kw)))
    first = StatefulDataLoader.from_storage(storage, collate_packed, local_batch_size=6, **kw)
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.state_dict()
    tail = []
    for rank in range(2):
        loader = StatefulDataLoader.from_storage(storage, collate_packed, local_batch_size=5, num_workers=2,
                                                 parallel_method="process", rank=rank, world_size=2, **kw)
        loader.load_state_dict(state)
        tail.append(list(loader))
    assert len(tail[0]) == len(tail[1])  # equal steps on both ranks
    merged = [b["tokens"][i] for pair in zip(*tail) for i in range(len(pair[0]["tokens"])) for b in pair]
    masks = [b["loss_mask"][i] for pair in zip(*tail) for i in range(len(pair[0]["tokens"])) for b in pair]
    rest = np.concatenate([t[m].numpy() for t, m in zip(merged, masks)])
    assert np.concatenate([real_tokens(head), rest]).tolist() == whole.tolist()


def test_token_stream_concat_and_rules(tmp_path, storage):
    stream = write_stream(tmp_path, "s", np.arange(500, dtype=np.int32))
    loader = StatefulDataLoader.from_storage(stream, collate_packed, sequence_length=L, packing="concat",
                                             local_batch_size=2)
    assert real_tokens(list(loader)).tolist() == list(range(500))  # 8 sequences, the last one padded
    with pytest.raises(TypeError, match="packing needs sequence_length"):
        StatefulDataLoader.from_storage(storage, collate_packed, packing="best_fit")
    with pytest.raises(TypeError, match="only for token stream storage"):
        StatefulDataLoader.from_storage(storage, list, sequence_length=L)  # guideloom's rule without packing


def test_collate_widens_unsigned_tokens():
    seq = PackedSequence.from_pieces([np.arange(3, dtype=np.uint16)], 4, 0, np.uint16)
    batch = collate_packed([seq, seq])
    assert batch["tokens"].dtype == torch.int32 and batch["tokens"].tolist() == [[0, 1, 2, 0]] * 2
    assert batch["loss_mask"].dtype == torch.bool and collate_packed([]) == {}


def test_stream_windows_equal_the_packer_node_stream(tmp_path):
    from lm_corpora import digest

    from torch_drt.lm import PackerNode

    stream = write_stream(tmp_path, "s", np.arange(5000, dtype=np.int32), shard_elements=333)
    loader = StatefulDataLoader.from_storage(stream, list, sequence_length=L, packing="concat", local_batch_size=4,
                                             shuffle=True, shuffle_seed=21, drop_last=False)
    node = PackerNode(stream, L, shuffle=True, seed=21)
    node.reset()
    assert [digest(s) for b in loader for s in b] == [digest(s) for s in node]
    with pytest.raises(TypeError, match=r"\['buffer_size'\] do not apply"):
        StatefulDataLoader.from_storage(stream, list, sequence_length=L, packing={"buffer_size": 4})
