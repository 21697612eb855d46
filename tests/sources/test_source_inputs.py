"""Bad input to the sources gets a clear, typed error: one rule for every source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from http_server import Server

from torch_drt import FileDataset, HttpDataset, ObjectStoreDataset


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def datasets(tmp_path, server):
    """Each source, from a list and from a template, over the same 3 items (item i is bytes([i]) * 16)."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for i in range(3):
        (tmp_path / f"{i}.bin").write_bytes(bytes([i]) * 16)
        fs.pipe_file(f"/inputs/{i}.bin", bytes([i]) * 16)
    return {
        "files": FileDataset([tmp_path / f"{i}.bin" for i in range(3)]),
        "file template": FileDataset.from_template(str(tmp_path / "{index}.bin"), length=3),
        "http": HttpDataset([server.url(f"/item/{i}") for i in range(3)]),
        "http template": HttpDataset.from_template(server.url("/item/{index}"), length=3),
        "store": ObjectStoreDataset("memory://inputs", [f"{i}.bin" for i in range(3)]),
        "store template": ObjectStoreDataset.from_template("memory://inputs", "{index}.bin", length=3),
    }


@pytest.mark.parametrize(
    "make",
    [
        lambda tmp: FileDataset(str(tmp / "labels.csv")),
        lambda tmp: FileDataset(tmp / "labels.csv"),
        lambda tmp: FileDataset(b"/x/labels.csv"),
        lambda tmp: HttpDataset("http://127.0.0.1:9/labels.csv"),
        lambda tmp: ObjectStoreDataset("memory://bucket", "labels.csv"),
        lambda tmp: ObjectStoreDataset("memory://bucket", Path("labels.csv")),
    ],
)
def test_a_single_location_is_refused(tmp_path, make):
    with pytest.raises(TypeError, match=r"got a single .*: pass a list of one"):
        make(tmp_path)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: FileDataset([1, 2]), "each path must be a str or an os.PathLike, got int"),
        (lambda: FileDataset(7), "expected a sequence of paths, got int"),
        (lambda: HttpDataset([b"http://x.example/"]), "each url must be a str, got bytes"),
        (lambda: ObjectStoreDataset("memory://bucket", [Path("a")]), "each key must be a str, got PosixPath"),
        (lambda: ObjectStoreDataset(7, ["a"]), "url must be a str, got int"),
    ],
)
def test_locations_of_another_type_are_refused(make, match):
    with pytest.raises(TypeError, match=match):
        make()


def test_a_list_of_one_path_works(tmp_path):
    (tmp_path / "labels.csv").write_bytes(b"a,b")
    assert FileDataset([tmp_path / "labels.csv"])[0] == FileDataset([str(tmp_path / "labels.csv")])[0] == b"a,b"


@pytest.mark.parametrize("index", [1.9, 1.0, "1", True, False, np.bool_(True), None, np.float32(1), [1]])
def test_only_ints_are_indices(datasets, index):
    for ds in datasets.values():
        with pytest.raises(TypeError, match="an item index must be an int"):
            ds[index]


@pytest.mark.parametrize("index", [3, -1, -4, np.int64(3), 2**70])
def test_out_of_range_is_an_index_error(datasets, index):
    for ds in datasets.values():
        with pytest.raises(IndexError, match="out of range for 3 items"):
            ds[index]


def test_ints_and_numpy_integers_are_indices(datasets):
    for name, ds in datasets.items():
        got = [ds[1], ds[np.int64(2)], ds[np.uint8(0)], ds[np.int32(1)]]
        assert got == [bytes([1]) * 16, bytes([2]) * 16, bytes([0]) * 16, bytes([1]) * 16], name


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda: FileDataset([], max_bytes=0), ValueError),
        (lambda: FileDataset([], max_bytes=1.5), ValueError),
        (lambda: FileDataset([], timeout=0), ValueError),
        (lambda: FileDataset([], timeout=float("nan")), ValueError),
        (lambda: FileDataset([], retries=-1), ValueError),
        (lambda: FileDataset([], retries=1.5), ValueError),
        (lambda: FileDataset([], backoff=float("inf")), ValueError),
        (lambda: HttpDataset([], timeout=None), ValueError),
        (lambda: HttpDataset([], connect_timeout=-1), ValueError),
        (lambda: HttpDataset([], headers={"Authorization": 7}), TypeError),
        (lambda: FileDataset.from_template("/x/{index}.bin", length=2.5), ValueError),
        (lambda: FileDataset.from_template("/x/{index}.bin", length=-1), ValueError),
    ],
)
def test_options_are_validated_up_front(make, error):
    with pytest.raises(error):
        make()
