"""Token-stream and document storages through StatefulDataLoader.from_storage."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torch_drt import StatefulDataLoader
from torch_drt.storage import DocumentStorage, DocumentStorageWriter, TokenStreamStorage, TokenStreamWriter


def stack(items):
    return torch.from_numpy(np.stack(items)) if items else torch.empty(0)


@pytest.fixture
def stream(tmp_path):
    with TokenStreamWriter(tmp_path, "tokens", "int32", shard_elements=7) as writer:
        writer.write(np.arange(30))
        writer.write(np.arange(30, 53, dtype=np.int16))  # cast safely to int32
    return TokenStreamStorage(tmp_path / "tokens")


def test_windows_cross_shard_boundaries(stream):
    loader = StatefulDataLoader.from_storage(stream, stack, sequence_length=5, local_batch_size=2)
    got = torch.cat(list(loader)).tolist()
    assert got == [list(range(k, k + 5)) for k in range(0, 50, 5)]
    assert len(loader) == 5 and stream.total_elements == 53


def test_a_batch_of_windows_is_each_window_inside_a_shard_across_shards_or_read_by_ranges(stream, tmp_path):
    starts = [0, 5, 6, 7, 13, 14, 40, 48, 46]  # inside a shard, across one edge, across two (length 9 > 7)
    for storage in (stream, TokenStreamStorage(tmp_path / "tokens")):
        if storage is not stream:
            storage._arrays = [None] * len(storage._arrays)  # shards read by ranges (a URL's), not mapped
        for length in (1, 5, 9):
            ok = [s for s in starts if s + length <= 53]
            got = storage.windows(ok, length)
            assert [w.tolist() for w in got] == [list(range(s, s + length)) for s in ok]
            assert [w.tolist() for w in got] == [storage.window(s, length).tolist() for s in ok]
        assert storage.windows([], 5) == []
        for bad in ([0, 49], [-1, 0]):
            with pytest.raises(IndexError, match=rf"window \[{bad[0] if bad[0] < 0 else bad[1]}, "):
                storage.windows(bad, 5)
    assert not stream.windows([0], 5)[0].flags.writeable  # a view of the read-only map


def test_a_stream_dataset_reads_windows_by_index_and_refuses_indices_outside(stream):
    from torch_drt.storage import TokenStreamDataset

    windows = TokenStreamDataset(stream, 5)
    assert [w.tolist() for w in windows.__getitems__([9, 0, 1])] == [list(range(45, 50)), list(range(5)),
                                                                        list(range(5, 10))]
    assert windows[9].tolist() == list(range(45, 50)) and windows.__getitems__([]) == []
    for bad in ([3, 10], [-1, 2]):
        with pytest.raises(IndexError, match=f"index {bad[0] if bad[0] < 0 else bad[1]} is out of range for 10"):
            windows.__getitems__(bad)


def test_a_sample_written_through_torch_does_not_crash_or_reach_the_stream(stream):
    """torch's loader hands samples to ``torch.as_tensor`` (without batching, and in ``default_collate``) and a
    user's collate may use ``torch.from_numpy``: both ignore numpy's read-only flag, so a view of the read-only map
    crashed the interpreter (SIGSEGV) on an in-place write, and torch warned on each. A fresh interpreter, so that a
    crash fails this test and not pytest."""
    from script_runner import run_script

    done = run_script(f"""
        import warnings
        warnings.simplefilter("error")  # torch's "not writable" warning on a view of the map included
        import torch
        from torch_drt.storage import TokenStreamDataset, TokenStreamStorage
        dataset = TokenStreamDataset(TokenStreamStorage({str(stream.path)!r}), 5)
        for batch in torch.utils.data.DataLoader(dataset, batch_size=3,
                                                 collate_fn=lambda b: [torch.from_numpy(x) for x in b]):
            for sample in batch:  # a batch's samples, wrapped without a copy by a user's collate
                sample.zero_()
        assert next(iter(torch.utils.data.DataLoader(dataset, batch_size=2))).tolist() == [[0, 1, 2, 3, 4],
                                                                                         [5, 6, 7, 8, 9]]
        for loader in (torch.utils.data.DataLoader, __import__("torch_drt").StatefulDataLoader):
            sample = next(iter(loader(dataset, batch_size=None)))
            sample += 100
            assert sample.tolist() == [100, 101, 102, 103, 104], sample
        assert dataset[0].tolist() == [0, 1, 2, 3, 4]  # the stream is untouched
        from torch_drt.lm import PackedWindows
        windows = PackedWindows(dataset.storage, 5)
        item = next(iter(torch.utils.data.DataLoader(windows, batch_size=None)))
        for field in item:  # the tokens, and the fields every whole window shares
            field.zero_()
        assert windows[0].tokens.tolist() == [0, 1, 2, 3, 4] and windows[1].segment_ids.tolist() == [1] * 5
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_stream_shuffled_ranks_cover_every_window_once(stream):
    seen = []
    for rank in range(2):
        loader = StatefulDataLoader.from_storage(stream, stack, sequence_length=4, local_batch_size=3, rank=rank,
                                                 world_size=2, shuffle=True, shuffle_seed=1, num_workers=2)
        for batch in loader:
            seen += [row[0] // 4 for row in batch.tolist()]
    # 13 windows; drop_last drops the last (incomplete) global batch: 12 distinct windows, none twice
    assert len(seen) == len(set(seen)) == 12 and set(seen) <= set(range(13))


def test_sequence_length_rules(stream, tmp_path):
    with pytest.raises(ValueError, match="sequence_length must be specified"):  # guideloom's ValueError
        StatefulDataLoader.from_storage(stream, stack)
    with DocumentStorageWriter(tmp_path, "docs") as writer:
        writer.write(b"abc")
    with pytest.raises(TypeError, match="only for token stream storage"):
        StatefulDataLoader.from_storage(DocumentStorage(tmp_path / "docs"), list, sequence_length=4)
    with pytest.raises(TypeError, match="cannot write float64 tokens"):
        TokenStreamWriter(tmp_path, "x").write(np.ones(3))


def test_documents_of_variable_length(tmp_path):
    writer = DocumentStorageWriter(tmp_path, "docs", dtype="int64")
    for i in range(9):
        writer.write(np.arange(i + 1) * i)
    storage = DocumentStorage(writer.close())
    loader = StatefulDataLoader.from_storage(storage, list, local_batch_size=4, drop_last=False, num_workers=2)
    docs = [d.tolist() for b in loader for d in b]
    assert docs == [(np.arange(i + 1) * i).tolist() for i in range(9)]
    with pytest.raises(IndexError, match="document 9 is out of range"):
        storage[9]


def test_sample_cache_is_a_document_storage(make_cache):
    from conftest import payload

    storage = DocumentStorage(make_cache("c", n=6))
    loader = StatefulDataLoader.from_storage(storage, list, local_batch_size=3)
    assert [d for b in loader for d in b] == [payload(i) for i in range(6)]


def test_existing_stream_is_not_replaced(tmp_path, stream):
    writer = TokenStreamWriter(tmp_path, "tokens")
    writer.write([1, 2])
    with pytest.raises(FileExistsError, match="token stream already exists"):
        writer.close()
    assert TokenStreamStorage(tmp_path / "tokens").total_elements == 53
