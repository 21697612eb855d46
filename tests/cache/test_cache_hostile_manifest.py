"""Hostile manifests and indexes (issue 10): typed errors at open, never bytes from elsewhere, never a hang."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import QUIET, ListSource, rehash_manifest
from forked_runner import run_forked

import torch_drt as drt
from torch_drt.cache import open_cache

SEQ = drt.ReaderConfig(seed=0, shuffle=False)
VERIFY = drt.ReaderConfig(seed=0, shuffle=False, validate_cache=True)


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _save(path: Path, manifest: dict) -> None:
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_a_shard_name_outside_the_cache_is_refused_even_when_its_checksum_matches(runtime, make_cache, tmp_path):
    path = make_cache("t", n=5)
    secret = tmp_path / "secret.bin"
    shutil.copy(path / "shards" / "000000.bin", secret)  # same bytes, outside the cache
    (path / "shards" / "000000.bin").unlink()
    manifest = _manifest(path)
    rel = os.path.relpath(secret, path / "shards")
    assert rel.startswith("..")
    manifest["shards"][0]["name"] = rel
    _save(path, manifest)
    for config in (SEQ, VERIFY):
        with pytest.raises(drt.CacheCorruptError, match="not a plain, unique file name"):
            runtime.cached_dataset([path], reader_config=config)


@pytest.mark.parametrize("name", ["../x.bin", "/etc/passwd", ".hidden", "a/b", "", "..", "x\x00y"])
def test_shard_names_must_be_plain_file_names(make_cache, name):
    path = make_cache("t", n=3)
    manifest = _manifest(path)
    manifest["shards"][0]["name"] = name
    _save(path, manifest)
    with pytest.raises(drt.CacheCorruptError, match="not a plain, unique file name"):
        open_cache(path)


@pytest.mark.parametrize("digest", ["A" * 64, "a" * 63, "g" * 64, "a" * 64 + "\n", "a" * 48, " " + "a" * 63, "a" * 96])
def test_shard_checksums_must_be_32_or_64_lowercase_hex_digits(make_cache, digest):
    path = make_cache("t", n=3)
    manifest = _manifest(path)
    manifest["shards"][0]["sha256"] = digest
    _save(path, manifest)
    with pytest.raises(drt.CacheCorruptError, match="'sha256' is not a hex digest"):
        open_cache(path)


def test_an_index_entry_that_wraps_uint64_is_outside_its_shard(make_cache):
    path = make_cache("t", n=5)
    index = np.fromfile(path / "index.bin", dtype="<u8").reshape(-1, 4)
    index[2, 1], index[2, 2] = 2**64 - 8, 16  # offset + length wraps to 8
    index.tofile(path / "index.bin")
    rehash_manifest(path)  # a consistent forgery: only the bounds check can tell
    with pytest.raises(drt.CacheCorruptError, match="index entry of sample 2 lies outside its shard"):
        open_cache(path)


def test_a_manifest_swapped_for_another_caches_is_noticed_by_default(runtime, make_cache):
    a, b = make_cache("a", n=6), make_cache("b", n=6)
    manifest_b = _manifest(b)
    manifest_b["source_name"] = "a"
    _save(a, manifest_b)
    with pytest.raises(drt.CacheCorruptError, match="belongs to another cache") as info:
        runtime.cached_dataset([a], reader_config=SEQ)
    assert info.value.path.name in ("index.bin", "metadata.arrow")


def test_a_shard_swapped_for_another_caches_is_noticed_on_read(runtime, tmp_path):
    (a,) = runtime.write_cache([ListSource("a", 6)], tmp_path, writer_config=QUIET)
    (b,) = runtime.write_cache([ListSource("b", 6, start=7)], tmp_path, writer_config=QUIET)  # same sizes
    shutil.copy(b.path / "shards" / "000000.bin", a.path / "shards" / "000000.bin")
    ds = runtime.cached_dataset([a.path], reader_config=SEQ)  # the structure cannot tell
    with pytest.raises(drt.CacheCorruptError, match="sample 0: record fails its checksum"):
        list(ds)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_manifest_that_is_no_regular_file_is_refused_without_waiting_or_reading(make_cache, kind):
    path = make_cache("t", n=3)
    (path / "manifest.json").unlink()
    if kind == "fifo":
        os.mkfifo(path / "manifest.json")
    else:
        (path / "manifest.json").symlink_to("/dev/zero")
    proc = run_forked(
        f"""
        from torch_drt.cache import open_cache, CacheCorruptError
        try:
            open_cache({str(path)!r})
        except CacheCorruptError as e:
            print("CacheCorruptError:", e.reason)
        """,
        timeout=60,
    )
    assert proc.returncode == 0 and "not a regular file" in proc.stdout, (proc.stdout, proc.stderr[-500:])


@pytest.mark.parametrize("rel", ["index.bin", "metadata.arrow", "shards/000000.bin"])
def test_other_files_must_be_regular_files(make_cache, rel):
    path = make_cache("t", n=3)
    (path / rel).unlink()
    os.mkfifo(path / rel)
    with pytest.raises(drt.CacheCorruptError, match="not a regular file"):
        open_cache(path)


@pytest.mark.parametrize("cache_id", [-1, 2**64, True, 1.5, "7"])
def test_cache_ids_out_of_range_are_cache_corrupt_errors(make_cache, cache_id):
    path = make_cache("t", n=3)
    manifest = _manifest(path)
    manifest["cache_id"] = cache_id
    _save(path, manifest)
    with pytest.raises(drt.CacheCorruptError, match="cache_id"):
        open_cache(path)


def test_a_manifest_with_a_duplicated_key_is_refused(make_cache):
    path = make_cache("t", n=3)
    text = (path / "manifest.json").read_text()
    (path / "manifest.json").write_text(text.replace('"sample_count": 3', '"sample_count": 3, "sample_count": 2'))
    with pytest.raises(drt.CacheCorruptError, match="duplicated key 'sample_count'"):
        open_cache(path)


def test_a_zeroed_record_checksum_in_a_forged_index_fails_on_read(runtime, make_cache):
    path = make_cache("t", n=5)
    index = np.fromfile(path / "index.bin", dtype="<u8").reshape(-1, 4)
    index[3, 3] = 0
    index.tofile(path / "index.bin")
    rehash_manifest(path)
    ds = runtime.cached_dataset([path], reader_config=SEQ)
    with pytest.raises(drt.CacheCorruptError, match="sample 3: record fails its checksum"):
        list(ds)
    recorded = _manifest(path)["files"]["index.bin"]["sha256"]
    assert hashlib.sha256((path / "index.bin").read_bytes()).hexdigest() == recorded  # the index itself is "valid"


@pytest.mark.parametrize("column", ["weight", "__cache_pos"])
def test_stored_columns_named_like_the_tables_own_are_refused(make_cache, column):
    path = make_cache("t", n=3)
    manifest = _manifest(path)
    manifest["metadata_schema"][0]["name"] = column
    _save(path, manifest)
    with pytest.raises(ValueError, match="torch_drt cannot load it"):
        open_cache(path)


@pytest.mark.parametrize("rel", ["shards/000000.bin", "metadata.arrow", "index.bin", "manifest.json", "shards"])
def test_a_symlinked_cache_file_is_refused(make_cache, tmp_path, rel):
    """A link pointing outside the cache (to a file of the same size: only the size is checked on open) is never
    followed: the cache is refused before any of its bytes are used."""
    path = make_cache("t", n=3)
    outside = tmp_path / "outside" / rel
    outside.parent.mkdir(parents=True)
    (path / rel).rename(outside)
    (path / rel).symlink_to(outside)
    with pytest.raises(drt.CacheCorruptError, match="symbolic link"):
        ds = drt.DatasetRuntime(1).cached_dataset(path, reader_config=drt.ReaderConfig(seed=0))
        list(ds)
