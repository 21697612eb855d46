"""FileDataset and ObjectStoreDataset: real files, memory:// and a real S3-compatible server (moto)."""

from __future__ import annotations

import os
import pickle

import pytest
from s3_server import free_port, s3_fixture  # noqa: F401 (the s3 fixture)

from torch_drt import FileDataset, ObjectStoreDataset, StatefulDataLoader


@pytest.fixture
def files(tmp_path):
    paths = []
    for i in range(6):
        p = tmp_path / "slides" / f"s{i % 2}" / f"{i}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes([i]) * (10 + i))
        paths.append(p)
    return paths


def test_files_through_the_loader(files):
    loader = StatefulDataLoader(FileDataset(files), batch_size=4, num_workers=2, item_concurrency=2,
                                collate_fn=list)
    assert [x for b in loader for x in b] == [bytes([i]) * (10 + i) for i in range(6)]


def test_file_template(files, tmp_path):
    ds = FileDataset.from_template(str(tmp_path / "slides" / "{slide}" / "{index}.bin"),
                                   {"slide": [f"s{i % 2}" for i in range(6)]})
    assert [ds[i] for i in range(6)] == [p.read_bytes() for p in files]
    with pytest.raises(ValueError, match="may not contain"):
        FileDataset.from_template(str(tmp_path / "{s}.bin"), {"s": ["ok", "../etc/passwd"]})[1]


def test_file_errors(files, tmp_path):
    ds = FileDataset([*files[:1], tmp_path / "missing.bin"], max_bytes=10, retries=2, backoff=0.01)
    assert ds[0] == bytes([0]) * 10
    with pytest.raises(FileNotFoundError, match=r"missing\.bin failed after 1 attempt\(s\)"):
        ds[1]  # not retried: only time-outs and interrupted reads are
    with pytest.raises(ValueError, match="over max_bytes=10"):
        FileDataset(files[1:2], max_bytes=10)[0]
    with pytest.raises(IndexError):
        ds[2]


def test_file_timeout_on_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it blocks until a writer comes: a hung network mount
    ds = FileDataset([fifo], timeout=0.2, retries=1, backoff=0.01)
    with pytest.raises(TimeoutError, match=r"failed after 2 attempt\(s\): timed out after 0\.2s"):
        ds[0]
    with open(fifo, "wb"):  # release the abandoned attempts' threads
        pass


def test_memory_object_store_and_template():
    import fsspec

    fs = fsspec.filesystem("memory")
    for i in range(4):
        fs.pipe_file(f"/bucket/tiles/a.svs/{i}.png", bytes([i]) * 8)
    ds = ObjectStoreDataset.from_template("memory://bucket/tiles", "{slide}/{index}.png", {"slide": ["a.svs"] * 4})
    assert [ds[i] for i in range(4)] == [bytes([i]) * 8 for i in range(4)]
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._fs is None and clone[2] == bytes([2]) * 8
    with pytest.raises(FileNotFoundError, match=r"failed after 1 attempt\(s\)"):
        ObjectStoreDataset("memory://bucket/tiles", ["nope.png"])[0]
    with pytest.raises(ValueError, match="key part may not be empty"):
        ObjectStoreDataset.from_template("memory://bucket", "{a}/x", {"a": ["", "b"]})


def test_s3_through_the_real_protocol(s3):
    ds = ObjectStoreDataset("s3://bucket/tiles", [f"{i}.png" for i in range(6)], options=s3)
    loader = StatefulDataLoader(ds, batch_size=3, num_workers=2, item_concurrency=3, collate_fn=list)
    assert [x for b in loader for x in b] == [bytes([i]) * (100 + i) for i in range(6)]


def test_s3_errors(s3):
    with pytest.raises(FileNotFoundError, match=r"s3://bucket/tiles/missing\.png failed after 1 attempt"):
        ObjectStoreDataset("s3://bucket/tiles", ["missing.png"], options=s3)[0]
    with pytest.raises(ValueError, match="over max_bytes=1000"):
        ObjectStoreDataset("s3://bucket/tiles", ["big.bin"], options=s3, max_bytes=1000)[0]


def test_s3_process_workers(s3):
    ds = ObjectStoreDataset.from_template("s3://bucket/tiles", "{index}.png", length=6, options=s3)
    loader = StatefulDataLoader(ds, batch_size=2, num_workers=2, worker_method="process", collate_fn=list,
                                multiprocessing_context="spawn")
    assert [len(x) for b in loader for x in b] == [100 + i for i in range(6)]


def test_unreachable_store_is_retried_then_fails():
    options = {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{free_port()}"}, "key": "k", "secret": "s",
               "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 0.5}}
    pytest.importorskip("s3fs")
    ds = ObjectStoreDataset("s3://bucket/tiles", ["0.png"], options=options, retries=1, backoff=0.01)
    with pytest.raises(OSError, match=r"failed after 2 attempt\(s\)") as info:
        ds[0]
    assert "secret" not in str(info.value)
