"""Damaged caches: each corruption has a clear error naming the file, and nothing published is touched."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import QUIET, ListSource, rehash_manifest

import torch_drt as drt
from torch_drt.cache.validate import open_cache

SEQ = drt.ReaderConfig(seed=0, shuffle=False)
VERIFY = drt.ReaderConfig(seed=0, shuffle=False, validate_cache=True)


def _tree_digest(path: Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in path.rglob("*")
        if p.is_file()
    }


def _edit_manifest(path: Path, edit) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def _truncate(path: Path) -> Path:
    shard = path / "shards" / "000000.bin"
    shard.write_bytes(shard.read_bytes()[:-3])
    return shard


def _tamper(path: Path) -> Path:
    shard = path / "shards" / "000000.bin"
    body = bytearray(shard.read_bytes())
    body[5] ^= 0xFF
    shard.write_bytes(bytes(body))
    return shard


def _zero_checksum(path: Path) -> Path:
    _edit_manifest(path, lambda m: m["shards"][0].update(sha256="0" * 64))
    return path / "shards" / "000000.bin"


def _write(rel: str, data: bytes | None = None, *, cut: int = 0):
    def damage(path: Path) -> Path:
        target = path / rel
        if data is None and not cut:
            target.unlink()
        elif cut:
            target.write_bytes(target.read_bytes()[:-cut])
        else:
            target.write_bytes(data)
        return target

    return damage


def _manifest(edit, culprit: str = "manifest.json"):
    def damage(path: Path) -> Path:
        _edit_manifest(path, edit)
        return path / culprit

    return damage


CASES = {
    "missing manifest": (_write("manifest.json"), SEQ, "manifest is missing"),
    "garbled manifest": (_write("manifest.json", b"{not json"), SEQ, "manifest is not valid JSON"),
    "manifest not an object": (_write("manifest.json", b"[1]"), SEQ, "manifest is not a JSON object"),
    "unknown version": (_manifest(lambda m: m.update(format_version=99)), SEQ, "unsupported cache format"),
    "truncated shard": (_truncate, SEQ, "truncated?"),
    "missing shard": (_write("shards/000000.bin"), SEQ, "shard file is missing"),
    "tampered shard": (_tamper, VERIFY, "checksum mismatch"),
    "zeroed checksum": (_zero_checksum, VERIFY, "manifest records no usable checksum"),
    "count beyond index": (  # the manifest contradicts the index size it records itself
        _manifest(lambda m: m.update(sample_count=11)),
        SEQ,
        "manifest field 'sample_count' is 11, but the index it records ('byte_len' 320) holds 10 entries",
    ),
    "count and index size beyond index": (  # a consistent manifest: the index file is short
        _manifest(lambda m: (m.update(sample_count=11), m["files"]["index.bin"].update(byte_len=352)), "index.bin"),
        SEQ,
        "11 samples need 352",
    ),
    "truncated index": (_write("index.bin", cut=24), SEQ, "index is 296 bytes"),
    "missing index": (_write("index.bin"), SEQ, "index file is missing"),
    "garbled metadata": (_write("metadata.arrow", b"garbage"), SEQ, "damaged or belongs to another cache"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_corruption_is_a_clear_error_naming_the_file(runtime, make_cache, case):
    damage, config, message = CASES[case]
    good = make_cache("good", n=10)
    bad = make_cache("bad", n=10)
    good_before = _tree_digest(good)
    culprit = damage(bad)
    with pytest.raises(drt.CacheCorruptError) as info:
        runtime.cached_dataset([good, bad], reader_config=config)
    assert info.value.path == culprit
    assert message in str(info.value)
    assert str(culprit) in str(info.value)
    assert _tree_digest(good) == good_before
    assert [s.data for s in runtime.cached_dataset([good], reader_config=VERIFY)][:2] != []


def test_tampered_shard_loads_without_checksums_and_fails_with_them(runtime, make_cache):
    path = make_cache("t", n=10)
    _tamper(path)
    runtime.cached_dataset([path], reader_config=SEQ)  # structure only: no hashing of payloads
    with pytest.raises(drt.CacheCorruptError, match="checksum mismatch"):
        runtime.cached_dataset([path], reader_config=VERIFY)


def test_index_metadata_row_mismatch(runtime, tmp_path, make_cache):
    a = make_cache("a", n=10)
    b = make_cache("b", n=12)
    shutil.copy(b / "metadata.arrow", a / "metadata.arrow")
    with pytest.raises(drt.CacheCorruptError, match="belongs to another cache"):
        open_cache(a)
    rehash_manifest(a)  # a manifest that agrees with the swapped file: the row count still tells
    with pytest.raises(
        drt.CacheCorruptError, match="metadata has 12 rows but the manifest records 10 samples"
    ) as info:
        open_cache(a)
    assert info.value.path == a / "metadata.arrow"


def test_index_entry_outside_shard(runtime, make_cache):
    import numpy as np

    path = make_cache("o", n=10)
    index = np.fromfile(path / "index.bin", dtype="<u8").reshape(-1, 4)
    index[4, 1] = 10**6
    index.tofile(path / "index.bin")
    rehash_manifest(path)
    with pytest.raises(drt.CacheCorruptError, match="index entry of sample 4 lies outside its shard"):
        open_cache(path)


def test_schemas_must_match_across_caches(runtime, tmp_path, make_cache):
    class Other:
        name = "other"

        def __iter__(self):
            yield drt.CacheInput(b"x", {"different": 1})

    a = make_cache("a", n=3)
    (res,) = runtime.write_cache([Other()], a.parent, writer_config=QUIET)
    with pytest.raises(ValueError, match="all caches must share one metadata schema"):
        runtime.cached_dataset([a, res.path], reader_config=SEQ)


def test_same_cache_twice_is_refused(runtime, make_cache):
    a = make_cache("a", n=3)
    with pytest.raises(ValueError, match="share cache_id"):
        runtime.cached_dataset([a, a], reader_config=SEQ)


def test_missing_path_and_a_file_instead_of_a_directory(runtime, tmp_path):
    with pytest.raises(FileNotFoundError, match="cache path does not exist"):
        runtime.cached_dataset([tmp_path / "nope"], reader_config=SEQ)
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(drt.CacheCorruptError, match="not a directory"):
        runtime.cached_dataset([tmp_path / "file"], reader_config=SEQ)


def test_from_cache_sources_rebuilds_a_corrupt_cache_and_keeps_the_old_one_aside(
    runtime, tmp_path, make_cache
):
    path = make_cache("r", n=5, root=tmp_path)
    _truncate(path)
    res = runtime.from_cache_sources([ListSource("r", 5)], tmp_path, reader_config=SEQ, writer_config=QUIET)
    assert len(res) == 5
    open_cache(path, verify=True)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(".invalid-r-")]
    assert len(aside) == 1 and (aside[0] / "manifest.json").exists()
