"""DocumentStorage.lengths() and arrays(): lengths without payloads, documents with one gather per cache."""

from __future__ import annotations

import numpy as np
import pytest

from torch_drt.storage import DocumentStorage, DocumentStorageWriter


def write(root, name, docs, dtype="int32"):
    with DocumentStorageWriter(root, name, dtype=dtype) as writer:
        for doc in docs:
            writer.write(doc)
    return root / name


def test_lengths_and_arrays_across_two_caches(tmp_path):
    a = [np.arange(n, dtype=np.int32) + 100 * n for n in (3, 0, 5)]
    b = [np.arange(n, dtype=np.int32) - n for n in (2, 7)]
    storage = DocumentStorage([write(tmp_path, "a", a), write(tmp_path, "b", b)])
    assert storage.lengths().tolist() == [3, 0, 5, 2, 7] and storage.dtype == np.int32
    got = storage.arrays([4, 0, 2, 4, 1])
    assert [g.tolist() for g in got] == [d.tolist() for d in (b[1], a[0], a[2], b[1], a[1])]
    with pytest.raises(IndexError, match="out of range for 5 documents"):
        storage.arrays([5])


def test_bytes_documents_have_no_arrays(tmp_path):
    with DocumentStorageWriter(tmp_path, "bytes") as writer:
        writer.write(b"abcd")
    storage = DocumentStorage(tmp_path / "bytes")
    assert storage.dtype is None and storage.lengths().tolist() == [4]
    with pytest.raises(TypeError, match="needs array documents"):
        storage.arrays([0])


def test_a_cache_without_a_length_column(make_cache):
    with pytest.raises(KeyError, match="has no 'length' column"):
        DocumentStorage(make_cache("plain", n=3)).lengths()


def test_a_one_byte_document_written_through_torch_changes_nothing_else(tmp_path):
    """A document of one uint8 token was an array over CPython's one shared ``bytes`` object of that value: a write
    through ``torch.as_tensor`` (a loader without batching) changed ``b"\\x07"`` in the whole interpreter, and the
    next read of that value failed its checksum. A fresh interpreter, as the damage is process-wide."""
    from script_runner import run_script

    with DocumentStorageWriter(tmp_path, "docs", dtype="uint8") as writer:
        for value in (7, 7, 9):
            writer.write(np.array([value], dtype=np.uint8))
    done = run_script(f"""
        import torch
        from torch_drt.storage import DocumentStorage
        storage = DocumentStorage({str(tmp_path / "docs")!r})
        for item in (storage[0], storage.__getitems__([0])[0], storage.arrays([0])[0]):
            torch.as_tensor(item).add_(1)
        assert bytes([7]) == bytes((7,)) and bytes([7])[0] == 7, bytes([7])
        assert storage[1].tolist() == [7], storage[1]
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
