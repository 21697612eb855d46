"""Cache sets: publish, open as one dataset, refuse mixed schemas, never overwrite, and hostile set manifests."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from build_helpers import SEQ, read_all
from conftest import ListSource

import torch_drt as drt
from torch_drt.cache import CacheCorruptError, is_cache_set, open_cache_set, publish_cache_set
from torch_drt.sets.cache_set import read_cache_set


@pytest.fixture
def parts(make_cache, tmp_path):
    """Three caches with one schema under tmp_path/caches."""
    return [make_cache(f"p{i}", n=4 + i, root=tmp_path / "caches") for i in range(3)]


def test_a_set_opens_as_its_parts_opened_together(runtime, tmp_path, parts):
    cache_set = publish_cache_set(tmp_path / "all", parts)
    assert is_cache_set(tmp_path / "all") and cache_set.sample_count == 4 + 5 + 6
    assert read_all(tmp_path / "all") == read_all_paths(runtime, parts)
    dataset = runtime.cached_dataset([tmp_path / "all"], reader_config=SEQ)
    assert dataset.cache_paths == [p.resolve() for p in parts]
    table = dataset.get_metadata()
    assert table.num_rows == 15 and sorted(set(table.column("cache_id").to_pylist())) == sorted(
        {drt.cache.open_cache(p).cache_id for p in parts}
    )


def read_all_paths(runtime, paths):
    dataset = runtime.cached_dataset(paths, reader_config=SEQ)
    return [(s.data, s.metadata, s.cache_id, s.sample_id) for s in dataset]


def test_manifest_records_each_part(tmp_path, parts):
    publish_cache_set(tmp_path / "caches" / "set", parts)
    body = json.loads((tmp_path / "caches" / "set" / "cacheset.json").read_text())
    assert body["format"] == "torch_drt.cacheset" and body["format_version"] == 1 and body["name"] == "set"
    assert body["sample_count"] == 15
    first = body["parts"][0]
    assert first["path"] == "../p0"  # relative to the set directory when it lies beside it
    assert first["sample_count"] == 4 and len(first["manifest_sha256"]) == 64
    assert first["metadata_schema"][0] == {"name": "flag", "kind": "bool"}
    assert first["cache_id"] == drt.cache.open_cache(parts[0]).cache_id


def test_schema_mismatch_names_the_part_and_publishes_nothing(runtime, tmp_path, parts):
    class Other:
        name = "other"

        def __iter__(self):
            yield drt.CacheInput(b"x", {"label": 1})

    (odd,) = runtime.write_cache([Other()], tmp_path / "caches", writer_config=drt.WriterConfig(show_progress=False))
    with pytest.raises(ValueError, match=r"part .*other has metadata schema \[\('label', 'int'\)\], but part"):
        publish_cache_set(tmp_path / "mixed", [*parts, odd.path])
    assert not is_cache_set(tmp_path / "mixed")


def test_repeated_part_and_no_part_are_refused(tmp_path, parts):
    with pytest.raises(ValueError, match="share cache id"):
        publish_cache_set(tmp_path / "twice", [parts[0], parts[0]])
    with pytest.raises(ValueError, match="at least one part"):
        publish_cache_set(tmp_path / "none", [])
    with pytest.raises(ValueError, match="invalid cache set name"):
        publish_cache_set(tmp_path / ".hidden", parts)


def test_an_existing_set_is_never_overwritten(tmp_path, parts):
    publish_cache_set(tmp_path / "s", parts[:1])
    before = (tmp_path / "s" / "cacheset.json").read_bytes()
    with pytest.raises(FileExistsError, match="cache set already exists"):
        publish_cache_set(tmp_path / "s", parts)
    assert (tmp_path / "s" / "cacheset.json").read_bytes() == before
    assert not [p for p in (tmp_path / "s").iterdir() if p.name.endswith(".tmp")]


RACE = textwrap.dedent(
    """
    import sys
    from torch_drt.cache import publish_cache_set
    try:
        publish_cache_set(sys.argv[1], sys.argv[2:])
        print("published")
    except FileExistsError:
        print("exists")
    """
)


def test_concurrent_publishers_one_wins_the_other_is_refused(tmp_path, parts):
    procs = [
        subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path / "race"), *map(str, parts[: 1 + k])],
                         stdout=subprocess.PIPE, text=True)
        for k in range(2)
    ]
    outs = sorted(p.communicate(timeout=120)[0].strip() for p in procs)
    assert outs == ["exists", "published"]
    assert len(read_cache_set(tmp_path / "race").parts) in (1, 2)


def test_a_part_replaced_after_publishing_is_detected(runtime, tmp_path):
    root = tmp_path / "c"
    (a,) = runtime.write_cache([ListSource("a", 5)], root, writer_config=drt.WriterConfig(show_progress=False))
    publish_cache_set(tmp_path / "s", [a.path])
    replaced = root / "b"
    runtime.write_cache([ListSource("b", 5, start=100)], root, writer_config=drt.WriterConfig(show_progress=False))
    manifest = json.loads((replaced / "manifest.json").read_text())
    manifest["cache_id"] = drt.cache.open_cache(a.path).cache_id  # same id and count, other samples
    manifest["source_name"] = "a"
    (a.path / "manifest.json").write_text(json.dumps(manifest))
    for f in ("index.bin", "metadata.arrow"):
        (a.path / f).write_bytes((replaced / f).read_bytes())
    (a.path / "shards" / "000000.bin").write_bytes((replaced / "shards" / "000000.bin").read_bytes())
    with pytest.raises(CacheCorruptError, match="not the cache the set recorded") as err:
        runtime.cached_dataset([tmp_path / "s"], reader_config=SEQ)
    assert err.value.path == a.path / "manifest.json"


def _manifest(tmp_path, parts, **changes):
    publish_cache_set(tmp_path / "s", parts)
    path = tmp_path / "s" / "cacheset.json"
    body = json.loads(path.read_text())
    body.update(changes)
    return path, body


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b.update(format="other"), "not a torch_drt.cacheset manifest"),
        (lambda b: b.update(format_version=2), "unsupported set format version 2"),
        (lambda b: b.update(parts=[]), "lists no parts"),
        (lambda b: b.update(parts="x"), "lists no parts"),
        (lambda b: b.update(sample_count=99), "sample_count 99 is not the sum"),
        (lambda b: b["parts"][0].update(cache_id=-1), "is malformed"),
        (lambda b: b["parts"][0].update(cache_id="1"), "is malformed"),
        (lambda b: b["parts"][0].update(manifest_sha256="ab"), "is malformed"),
        (lambda b: b["parts"][0].pop("metadata_schema"), "is malformed"),
        (lambda b: b["parts"][0].update(path=""), "is malformed"),
        (lambda b: b["parts"].__setitem__(0, 7), "is malformed"),
        (lambda b: b["parts"][1].update(cache_id=b["parts"][0]["cache_id"]), "share cache id"),
        (lambda b: b["parts"][1].update(metadata_schema=[]), "all parts of a set must share one schema"),
        (lambda b: b["parts"][0].update(sample_count=3), "not the cache the set recorded"),
        (lambda b: b["parts"][0].update(path="missing"), "part missing does not exist"),
        (lambda b: b["parts"][0].update(path="p0\x00x"), "part field 'path' holds a NUL character"),
        (lambda b: b["parts"][0].update(cache_id=2**64), "is malformed: field 'cache_id' is 18446744073709551616"),
        (lambda b: b["parts"][0].update(sample_count=2**64), "malformed: field 'sample_count' is 18446744073709551616"),
    ],
)
def test_hostile_set_manifests_raise_cache_corrupt_error(runtime, tmp_path, parts, mutate, message):
    path, body = _manifest(tmp_path, parts)
    mutate(body)
    if body.get("parts") and isinstance(body["parts"], list) and "sample_count" not in str(message):
        body["sample_count"] = sum(p["sample_count"] for p in body["parts"] if isinstance(p, dict))
    path.write_text(json.dumps(body))
    with pytest.raises(CacheCorruptError, match=message):
        runtime.cached_dataset([tmp_path / "s"], reader_config=SEQ)


@pytest.mark.parametrize("raw", [b"", b"{", b"[1]", b"\xff\xfe", b'{"format": "torch_drt.cacheset"}'])
def test_unparseable_set_manifests(tmp_path, raw):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "cacheset.json").write_bytes(raw)
    with pytest.raises(CacheCorruptError) as err:
        open_cache_set(tmp_path / "s")
    assert err.value.path == tmp_path / "s" / "cacheset.json"


def test_a_set_manifest_with_a_duplicated_key_is_refused_as_a_cache_manifest_is(tmp_path, parts):
    path, body = _manifest(tmp_path, parts)
    text = json.dumps(body)
    path.write_text(text.replace('"format": ', '"name": "other", "format": ', 1))  # "name" twice
    with pytest.raises(CacheCorruptError, match="duplicated key 'name'") as err:
        open_cache_set(tmp_path / "s")
    assert err.value.path == path


def test_parts_whose_url_carries_secrets_are_refused_and_file_urls_open(runtime, tmp_path, parts):
    path, body = _manifest(tmp_path, parts)
    body["parts"][0]["path"] = "s3://key:secret@bucket/p0?X-Amz-Signature=abc"
    path.write_text(json.dumps(body))
    with pytest.raises(CacheCorruptError, match="must not carry credentials") as err:
        open_cache_set(tmp_path / "s")
    assert "secret" not in str(err.value) and "Signature" not in str(err.value)
    body["parts"][0]["path"] = f"file://{parts[0]}"
    path.write_text(json.dumps(body))
    assert len(open_cache_set(tmp_path / "s")[1]) == 3


def test_verify_checks_every_part(runtime, tmp_path, parts):
    publish_cache_set(tmp_path / "s", parts)
    shard = parts[1] / "shards" / "000000.bin"
    body = bytearray(shard.read_bytes())
    body[0] ^= 1
    shard.write_bytes(bytes(body))
    open_cache_set(tmp_path / "s")  # structure is intact
    with pytest.raises(CacheCorruptError, match="checksum mismatch") as err:
        open_cache_set(tmp_path / "s", verify=True)
    assert err.value.path == shard


def test_a_set_manifest_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    """The set manifest is read through the local backend: a FIFO (or device) is no manifest, and opening it must
    not wait for a writer that never comes."""
    import os
    import threading

    set_dir = tmp_path / "set"
    set_dir.mkdir()
    os.mkfifo(set_dir / "cacheset.json")
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_cache_set(set_dir)
        except BaseException as e:  # the test inspects it
            outcome.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(20)
    if reader.is_alive():  # let the blocked open return, then fail
        os.close(os.open(set_dir / "cacheset.json", os.O_WRONLY | os.O_NONBLOCK))
        reader.join(20)
        pytest.fail("reading a set manifest that is a FIFO waited for a writer")
    (error,) = outcome
    assert isinstance(error, CacheCorruptError) and "not a regular file" in str(error)
    assert str(set_dir / "cacheset.json") in str(error)
