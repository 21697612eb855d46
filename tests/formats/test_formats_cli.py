"""``torch-drt formats info|verify`` and ``open_dataset``: each format told from what lies at the location, locally
and on S3 (moto); a damaged dataset exits 1 naming the file; a pickled one is refused, not run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from arrow_tables import write_ipc, write_parquet
from canon import canon
from s3_server import s3_fixture  # noqa: F401

from torch_drt.cache.errors import FormatError
from torch_drt.cli import main
from torch_drt.formats import (
    ArrowDataset,
    LitDataset,
    MDSDataset,
    ParquetDataset,
    WebDatasetShards,
    detect_format,
    open_dataset,
)

pytestmark = pytest.mark.timeout(300)
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def datasets(tmp_path) -> dict[str, Path]:
    import io
    import tarfile

    out = {"mds": FIXTURES / "mds" / "plain", "litdata": FIXTURES / "litdata" / "plain"}
    (tmp_path / "pq").mkdir()
    write_parquet(tmp_path / "pq" / "a.parquet", 10)
    (tmp_path / "saved").mkdir()
    write_ipc(tmp_path / "saved" / "data-00000-of-00001.arrow", 6, stream=True)
    (tmp_path / "saved" / "state.json").write_text(json.dumps({"_data_files": [
        {"filename": "data-00000-of-00001.arrow"}]}))
    (tmp_path / "wds").mkdir()
    for s in range(2):
        with tarfile.open(tmp_path / "wds" / f"s-{s}.tar", "w") as tar:
            for i in range(3):
                info = tarfile.TarInfo(f"k{s}{i}.txt")
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
    out.update(parquet=tmp_path / "pq", arrow=tmp_path / "saved", webdataset=tmp_path / "wds")
    return out


def test_formats_are_told_from_what_lies_there(datasets):
    classes = {"mds": MDSDataset, "litdata": LitDataset, "parquet": ParquetDataset, "arrow": ArrowDataset,
               "webdataset": WebDatasetShards}
    for fmt, path in datasets.items():
        assert detect_format(path) == fmt
        assert type(open_dataset(path)) is classes[fmt]
    assert detect_format(str(datasets["webdataset"] / "s-{0..1}.tar")) == "webdataset"
    assert len(open_dataset(str(datasets["webdataset"] / "s-{0..1}.tar"))) == 6
    assert len(open_dataset(datasets["webdataset"])) == 6
    with pytest.raises(FormatError, match=r"no index\.json"):
        detect_format(FIXTURES)
    with pytest.raises(ValueError, match="format="):
        open_dataset(datasets["mds"], "zarr")


def test_info_prints_format_counts_and_fields(datasets, capsys):
    assert main(["formats", "info", str(datasets["mds"])]) == 0
    out = capsys.readouterr().out
    assert "mds, 9 samples in 2 shards" in out and "  arr_fixed: ndarray[2, 3]" in out and "  jpg: JpegImageFile" in out
    assert main(["formats", "info", str(datasets["parquet"]), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["format"] == "parquet" and summary["samples"] == 10 and summary["fields"]["s"] == "str"


def test_verify_reads_everything_and_names_damage(datasets, tmp_path, capsys):
    assert main(["formats", "verify", *(str(p) for p in datasets.values())]) == 0
    assert capsys.readouterr().out.count("ok      ") == 5
    damaged = tmp_path / "damaged"
    shutil.copytree(FIXTURES / "mds" / "hashed_zstd", damaged)
    shard = damaged / "shard.00001.mds.zstd"
    body = bytearray(shard.read_bytes())
    body[len(body) // 2] ^= 0x10
    shard.write_bytes(bytes(body))
    assert main(["formats", "verify", str(datasets["mds"]), str(damaged)]) == 1
    out = capsys.readouterr().out
    assert f"ok      {datasets['mds']}" in out and f"damaged {damaged}: {shard}:" in out
    assert main(["formats", "verify", str(FIXTURES / "mds" / "pickled")]) == 1
    assert "refused" in capsys.readouterr().out
    assert main(["formats", "verify", "--allow-pickle", str(FIXTURES / "mds" / "pickled")]) == 0


def test_info_of_a_remote_dataset(s3, capsys):
    import s3fs

    fs = s3fs.S3FileSystem(**s3)
    for f in sorted((FIXTURES / "litdata" / "zstd").iterdir()):
        fs.put_file(str(f), f"bucket/cli-formats/ld/{f.name}")
    url = "s3://bucket/cli-formats/ld"
    assert main(["formats", "info", url, "--storage-options", json.dumps(s3)]) == 0
    assert f"{url}: litdata, 5 samples in 3 shards" in capsys.readouterr().out
    assert main(["formats", "info", "s3://bucket/cli-formats/none", "--storage-options", json.dumps(s3)]) == 1


def test_every_reader_pickles_for_spawned_workers(datasets):
    import pickle

    for path in datasets.values():
        ds = open_dataset(path)
        first = ds[len(ds) - 1]
        copy = pickle.loads(pickle.dumps(ds))
        assert len(copy) == len(ds) and canon(copy[len(ds) - 1]) == canon(first)


def test_a_spawned_worker_reads_a_dataset_with_decoders():
    import torch_drt as drt

    ds = MDSDataset(FIXTURES / "mds" / "hashed_zstd")
    loader = drt.StatefulDataLoader(ds, batch_size=4, num_workers=1, multiprocessing_context="spawn",
                                    collate_fn=_ids)
    assert [i for batch in loader for i in batch] == [ds[i]["i"] for i in range(len(ds))]


def _ids(samples):
    return [s["i"] for s in samples]
