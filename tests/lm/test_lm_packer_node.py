"""PackerNode: torchdata save/load, rank shares of one global stream, sources, hostile storages."""

from __future__ import annotations

import json

import numpy as np
import pytest
from lm_corpora import L, digest, documents, write_documents, write_stream
from nodes_harness import check_save_load
from torchdata.nodes import Mapper

from torch_drt.cache.errors import CacheCorruptError
from torch_drt.lm import ArraySource, PackerNode
from torch_drt.storage import DocumentStorage, DocumentStorageWriter


@pytest.fixture
def source():
    return ArraySource.from_documents(documents(200, 3, 0))


@pytest.mark.parametrize("method", ["concat", "first_fit", "best_fit"])
def test_save_load_harness(source, method):
    node = PackerNode(source, L, method=method, buffer_size=5, shuffle=True, seed=1)
    check_save_load(Mapper(node, digest), midpoint=40)  # digests: arrays do not compare with ==


def test_save_load_harness_on_a_document_storage(tmp_path):
    storage = write_documents(tmp_path, "docs", documents(80, 4, 0, max_len=200))
    check_save_load(Mapper(PackerNode(storage, L, buffer_size=3, overlong="split"), digest), midpoint=17)


def ranks_stream(source, world_size, **kw):
    """Every rank's items, merged back by position p = k * world_size + rank."""
    nodes = [PackerNode(source, L, rank=r, world_size=world_size, **kw) for r in range(world_size)]
    per_rank = []
    for node in nodes:
        node.reset()
        per_rank.append(list(node))
    assert len({len(items) for items in per_rank}) == 1  # equal counts: every rank takes the same steps
    return [per_rank[p % world_size][p // world_size] for p in range(world_size * len(per_rank[0]))]


@pytest.mark.parametrize("world_size", [2, 3, 7])
def test_ranks_share_the_single_rank_stream(source, world_size):
    single = ranks_stream(source, 1, shuffle=True, seed=2)
    merged = ranks_stream(source, world_size, shuffle=True, seed=2)
    assert [digest(s) for s in merged[: len(single)]] == [digest(s) for s in single]
    tail = merged[len(single) :]
    assert len(tail) < world_size and all(s.num_tokens == 0 for s in tail)  # the last group is padded


def test_every_rank_checkpoints_the_same_global_position(source):
    states = []
    for rank in range(4):
        node = PackerNode(source, L, rank=rank, world_size=4, shuffle=True)
        node.reset()
        for _ in range(5):
            next(node)
        states.append(json.dumps(node.state_dict(), sort_keys=True))
    assert len(set(states)) == 1 and json.loads(states[0])["position"] == 20


@pytest.mark.parametrize("items", [9, 5])  # 5: resumed at position 10, not a multiple of the new world size
def test_resume_at_another_world_size(source, items):
    reference = ranks_stream(source, 1, method="first_fit", buffer_size=6)
    two = [PackerNode(source, L, method="first_fit", buffer_size=6, rank=r, world_size=2) for r in range(2)]
    got = []
    for _ in range(items):
        for node in two:
            if not node._BaseNode__initialized:
                node.reset()
            got.append(next(node))
    state = two[1].state_dict()
    three = [PackerNode(source, L, method="first_fit", buffer_size=6, rank=r, world_size=3) for r in range(3)]
    for node in three:
        node.reset(state)
    rest = [list(node) for node in three]
    got += [rest[p % 3][p // 3] for p in range(3 * len(rest[0]))]
    assert [digest(s) for s in got[: len(reference)]] == [digest(s) for s in reference]
    assert all(s.num_tokens == 0 for s in got[len(reference) :])


def test_a_checkpoint_of_other_settings_is_refused(source):
    node = PackerNode(source, L, buffer_size=4)
    node.reset()
    next(node)
    with pytest.raises(ValueError, match="checkpoint was packed with"):
        PackerNode(source, L, buffer_size=5).reset(node.state_dict())


def test_token_counts_are_global(source):
    nodes = [PackerNode(source, L, rank=r, world_size=3) for r in range(3)]
    delivered = 0
    for node in nodes:
        node.reset()
        for _ in range(4):
            delivered += next(node).num_tokens
    assert nodes[0].tokens == nodes[2].tokens == delivered
    assert nodes[0].state_dict()["stream"]["tokens"] == delivered


def test_token_stream_is_concatenate_and_chunk(tmp_path):
    storage = write_stream(tmp_path, "s", np.arange(1000, dtype=np.int32), shard_elements=77)
    node = PackerNode(storage, L, method="concat")
    node.reset()
    seqs = list(node)
    want = [list(range(k, min(k + L, 1000))) for k in range(0, 1000, L)]
    assert [s.tokens[s.loss_mask].tolist() for s in seqs] == want
    assert seqs[-1].num_tokens == 1000 % L and seqs[0].segment_ids.tolist() == [1] * L


def test_bytes_documents_are_refused(tmp_path):
    with DocumentStorageWriter(tmp_path, "b") as writer:
        writer.write(b"abc")
    with pytest.raises(TypeError, match="needs token arrays"):
        PackerNode(DocumentStorage(tmp_path / "b"), L)
    with pytest.raises(TypeError, match="expected a TokenSource"):
        PackerNode([1, 2, 3], L)


def test_a_document_shorter_than_its_length_column_is_a_typed_error(tmp_path, runtime):
    import torch_drt as drt

    class Lying:
        name = "lying"

        def __iter__(self):
            yield drt.CacheInput(np.arange(10, dtype=np.int32).tobytes(), {"length": 10, "dtype": "<i4"})
            yield drt.CacheInput(np.arange(5, dtype=np.int32).tobytes(), {"length": 100, "dtype": "<i4"})
            yield drt.CacheInput(b"\x00" * 7, {"length": 1, "dtype": "<i4"})

    (result,) = runtime.write_cache([Lying()], tmp_path, writer_config=drt.WriterConfig(show_progress=False))
    node = PackerNode(DocumentStorage(result.path), L, method="concat")
    node.reset()
    with pytest.raises(CacheCorruptError, match="document 1 holds 5 tokens but its length column says 100"):
        next(node)
    with pytest.raises(RuntimeError, match="stream stopped at position 0"):
        next(node)  # the node does not go on from a half-read position
    node = PackerNode(DocumentStorage(result.path), L, method="best_fit", overlong="drop")
    node.reset()
    with pytest.raises(CacheCorruptError, match="document 2"):
        list(node)


def test_validation(source):
    with pytest.raises(ValueError, match="overlong='cut'"):
        PackerNode(source, L, overlong="cut")
    with pytest.raises(ValueError, match="buffer_size=0"):
        PackerNode(source, L, buffer_size=0)
    with pytest.raises(ValueError, match=r"rank=3 must be in \[0, world_size=3\)"):
        PackerNode(source, L, rank=3, world_size=3)


def test_a_tampered_checkpoint_is_refused(source):
    node = PackerNode(source, L, buffer_size=4)
    node.reset()
    next(node)
    state = json.loads(json.dumps(node.state_dict()))
    bins = state["stream"]["planner"]["packer"]["bins"]
    assert bins, "the test needs an open sequence"
    bins[0][2] = 10_000  # a piece starting far beyond the end of its document
    with pytest.raises(ValueError, match="outside the source's documents"):
        PackerNode(source, L, buffer_size=4).reset(state)
    state["stream"]["planner"]["cursor"] = 10**9
    with pytest.raises(ValueError, match="cursor"):
        PackerNode(source, L, buffer_size=4).reset(state)
