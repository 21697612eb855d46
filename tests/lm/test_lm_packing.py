"""Packing algorithms against plain reference implementations, and the assembled sequences token by token."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_drt.lm import ArraySource, PackedSequence, PackerNode
from torch_drt.lm.packing import make_packer
from torch_drt.lm.planner import SourcePlanner


def reference_fit(pieces, length, bins, best):
    """The documented fit rules, written plainly: a list of open bins in opening order, each [room, segments]."""
    open_bins, out = [], []
    for doc, start, n in pieces:
        if n == length:
            out.append([doc, start, n])
            continue
        fits = [b for b in open_bins if b[0] >= n]
        if fits:
            # best: least room, ties by bin number (= the reference's slot); first: oldest
            target = min(fits, key=lambda b: (b[0], b[2])) if best else fits[0]
            target[0] -= n
            target[1] += [doc, start, n]
            if target[0] == 0:
                out.append(target[1])
                open_bins.remove(target)
            continue
        if len(open_bins) == bins:
            fullest = min(open_bins, key=lambda b: (b[0], b[2]) if best else b[0])
            out.append(fullest[1])
            open_bins.remove(fullest)
        slot = min(set(range(bins)) - {b[2] for b in open_bins})
        open_bins.append([length - n, [doc, start, n], slot])
    out += [b[1] for b in open_bins]
    return out


def reference_concat(pieces, length):
    out, cur, fill = [], [], 0
    for doc, start, n in pieces:
        while n:
            take = min(n, length - fill)
            cur += [doc, start, take]
            fill, start, n = fill + take, start + take, n - take
            if fill == length:
                out.append(cur)
                cur, fill = [], 0
    return out + ([cur] if cur else [])


def run(packer, pieces):
    out = []
    for p in pieces:
        packer.add(*p)
        out += list(packer.ready)
        packer.ready.clear()
    packer.flush()
    return out + list(packer.ready)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=0, max_size=120),
    length=st.integers(8, 40),
    bins=st.integers(1, 6),
)
@pytest.mark.parametrize("method", ["first_fit", "best_fit", "concat"])
def test_plans_equal_the_reference(method, sizes, length, bins):
    pieces = [(i, 0, min(n, length)) for i, n in enumerate(sizes)]
    got = run(make_packer(method, length, bins), pieces)
    want = reference_concat(pieces, length) if method == "concat" else reference_fit(
        pieces, length, bins, best=method == "best_fit"
    )
    assert got == want


@pytest.mark.parametrize("method", ["first_fit", "best_fit", "concat"])
def test_state_restores_mid_stream(method):
    rng = np.random.default_rng(1)
    pieces = [(i, 0, int(n)) for i, n in enumerate(rng.integers(1, 50, 300))]
    whole = run(make_packer(method, 50, 5), pieces)
    first = make_packer(method, 50, 5)
    done = []
    for p in pieces[:137]:
        first.add(*p)
    state = first.state()
    done = list(first.ready)
    second = make_packer(method, 50, 5)
    second.restore(state)
    second.ready.clear()
    assert done + run(second, pieces[137:]) == whole


def test_restore_refuses_a_foreign_state():
    packer = make_packer("best_fit", 10, 2)
    with pytest.raises(ValueError, match="invalid bin 5"):
        packer.restore({"bins": [[5, 0, 0, 3]], "ready": []})
    with pytest.raises(ValueError, match="over length=10"):
        packer.restore({"bins": [[0, 0, 0, 11]], "ready": []})
    with pytest.raises(ValueError, match="method='next_fit'"):
        make_packer("next_fit", 10, 2)


def reference_sequence(docs, plan, length, pad):
    """Token by token: what a packed sequence must hold."""
    tokens, seg, pos = [], [], []
    for k in range(0, len(plan), 3):
        doc, start, n = plan[k : k + 3]
        for j in range(n):
            tokens.append(int(docs[doc][start + j]))
            seg.append(k // 3 + 1)
            pos.append(j)
    real = len(tokens)
    return tokens + [pad] * (length - real), seg + [0] * (length - real), pos + [0] * (length - real), real


@pytest.mark.parametrize("overlong", ["split", "drop", "truncate"])
@pytest.mark.parametrize("method", ["first_fit", "best_fit", "concat"])
def test_sequences_hold_every_token_once_with_segments_and_positions(method, overlong):
    rng = np.random.default_rng(7)
    docs = [np.arange(n, dtype=np.int32) + 10_000 * i for i, n in enumerate(rng.integers(0, 90, 120))]
    source = ArraySource.from_documents(docs)
    length = 32
    node = PackerNode(source, length, method=method, buffer_size=4, overlong=overlong, pad_id=-1)
    node.reset()
    planner = SourcePlanner(source.lengths(), length, method, 4, overlong, False, 0)
    planner.start(0)
    delivered = []
    for seq in node:
        tokens, seg, pos, real = reference_sequence(docs, planner.next_plan(), length, -1)
        assert seq.tokens.tolist() == tokens and seq.segment_ids.tolist() == seg
        assert seq.positions.tolist() == pos and seq.loss_mask.tolist() == [True] * real + [False] * (length - real)
        delivered += seq.tokens[seq.loss_mask].tolist()
    if overlong == "drop":
        expected = [t for d in docs if len(d) <= length for t in d.tolist()]
    elif overlong == "truncate":
        expected = [t for d in docs for t in d[:length].tolist()]
    else:
        expected = [t for d in docs for t in d.tolist()]
    assert sorted(delivered) == sorted(expected)
    assert len(delivered) == len(set(delivered))
    if method == "concat":
        assert delivered == expected  # concatenation keeps the document order


def test_a_whole_sequence_is_its_own_copy_and_padding_is_explicit():
    source = ArraySource.from_documents([np.arange(8), np.arange(3)], dtype=np.int64)
    node = PackerNode(source, 8, method="concat", pad_id=99)
    node.reset()
    full, short = list(node)
    assert full.tokens.tolist() == list(range(8)) and full.segment_ids.tolist() == [1] * 8
    for array in full:  # a write (torch.as_tensor ignores the flag) changes neither the source nor later items
        assert array.flags.writeable and not np.shares_memory(array, source.tokens)
    full.segment_ids[:] = 0
    node.reset()
    assert next(iter(node)).segment_ids.tolist() == [1] * 8
    assert short.tokens.tolist() == [0, 1, 2] + [99] * 5 and short.num_tokens == 3
    assert short.segment_ids.tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    pad = PackedSequence.padding(4, 5, np.int32)
    assert pad.tokens.tolist() == [5] * 4 and not pad.loss_mask.any() and pad.num_tokens == 0
    with pytest.raises(ValueError, match="do not fit"):
        PackedSequence.from_pieces([np.arange(5)], 4, 0, np.int32)


def test_writing_a_packed_stream_window_through_torch_does_not_crash():
    """A whole window of a stream was a view of the read-only map: ``torch.as_tensor`` (a loader without batching)
    ignores numpy's flag, and an in-place write was a SIGSEGV. A fresh interpreter, so a crash fails this test."""
    from script_runner import run_script

    done = run_script("""
        import tempfile
        from pathlib import Path
        import numpy as np
        import torch
        import torch_drt
        from torch_drt.lm import PackerNode
        from torch_drt.storage import TokenStreamStorage, TokenStreamWriter
        root = Path(tempfile.mkdtemp())
        with TokenStreamWriter(root, "s", "int32", shard_elements=1000) as writer:
            writer.write(np.arange(64, dtype=np.int32))
        loader = torch_drt.StatefulDataLoader(PackerNode(TokenStreamStorage(root / "s"), 8, method="concat"),
                                              batch_size=None)
        item = next(iter(loader))
        for field in item:
            field.zero_()
        again = next(iter(loader))
        assert again.tokens.tolist() == list(range(8)) and again.segment_ids.tolist() == [1] * 8, again
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
