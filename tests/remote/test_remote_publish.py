"""Publishing at a URL: stage, upload the data, manifest last and never over an existing one; one writer per name
(conditional puts, or the claim-and-settle rule on stores without them); a writer killed at any step leaves
nothing that opens, and the next writer of the name cleans up and publishes."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import ListSource, write_result
from remote_fixtures import BUCKET, moto_fixture, options, proxy_fixture, remote_config, unique  # noqa: F401

import torch_drt as drt
from torch_drt.cache import CacheCorruptError, open_cache
from torch_drt.locations.remote_publish import CLAIM_FILE
from torch_drt.locations.remote_store import RemoteStore

pytestmark = pytest.mark.timeout(180)
QUIET = drt.WriterConfig(show_progress=False, max_shard_bytes=300)
SEQ = drt.ReaderConfig(seed=0, shuffle=False)


def _samples(ds) -> list[bytes]:
    return [s.data for s in ds]


def test_a_cache_written_to_s3_uploads_its_manifest_last_and_reads_back(runtime, tmp_path, proxy):
    name = unique("pub")
    config = remote_config(tmp_path)
    (result,) = runtime.write_cache(ListSource(name, 200), f"s3://{BUCKET}", writer_config=QUIET,
                                    storage_options=options(proxy), remote_config=config)
    assert result == drt.CacheWriteSuccess(name, f"s3://{BUCKET}/{name}")
    puts = [p.rsplit(f"/{name}/", 1)[1] for p in proxy.puts if f"/{name}/" in p]
    files = [p for p in puts if p != CLAIM_FILE]  # the claim is renewed around the manifest too
    assert puts[0] == CLAIM_FILE and files[-1] == "manifest.json"  # the name claimed first, the manifest last
    assert {"index.bin", "metadata.arrow", "shards/000000.bin"} <= set(files[:-1])
    store = RemoteStore(result.path, options(proxy))
    assert CLAIM_FILE not in store.list()  # the claim is released
    (local,) = runtime.write_cache(ListSource(name, 200), tmp_path / "local", writer_config=QUIET)
    remote = runtime.cached_dataset(result.path, reader_config=SEQ, storage_options=options(proxy),
                                    remote_config=config)
    assert _samples(remote) == _samples(runtime.cached_dataset(local.path, reader_config=SEQ))
    assert open_cache(result.path, verify=True, storage_options=options(proxy), remote_config=config)


def test_a_url_root_is_written_and_profiled_as_a_local_one_is_with_its_upload_as_the_publish_stage(
    runtime, tmp_path, proxy
):
    name, staging = unique("profiled"), tmp_path / "staging"
    staging.mkdir()
    config = remote_config(tmp_path, staging_dir=str(staging))
    stages = {}
    for side, root in (("local", tmp_path / "local"), ("remote", f"s3://{BUCKET}")):
        profiler = drt.WriterProfilerConfig(enabled=True, path=tmp_path / f"{side}.json")
        writer = drt.WriterConfig(show_progress=False, max_shard_bytes=300, profiler=profiler)
        runtime.write_cache(ListSource(name, 50), root, writer_config=writer, storage_options=options(proxy),
                            remote_config=config)
        (source,) = json.loads((tmp_path / f"{side}.json").read_text())["sources"]
        stages[side] = [stage["name"] for stage in source["stages"]]
    assert stages["remote"] == stages["local"] and "publish" in stages["remote"]
    assert list(staging.iterdir()) == []  # the staging directory under RemoteConfig.staging_dir is gone


def test_an_existing_manifest_is_never_overwritten(runtime, tmp_path, proxy):
    name = unique("once")
    root = f"s3://{BUCKET}"
    runtime.write_cache(ListSource(name, 20), root, writer_config=QUIET, storage_options=options(proxy))
    store = RemoteStore(f"{root}/{name}", options(proxy))
    before = store.read("manifest.json")
    with pytest.raises(drt.CacheSourcesError) as info:
        runtime.write_cache(ListSource(name, 30), root, writer_config=QUIET, storage_options=options(proxy))
    (again,) = info.value.results
    assert isinstance(again, drt.CacheWriteError) and "already exists" in again.message
    assert not store.put_new("manifest.json", b"{}")  # S3's If-None-Match refuses the overwrite itself
    assert store.read("manifest.json") == before


def _write_in_child(name: str, opts: dict, conditional: bool, settle: float, barrier, out) -> None:
    config = drt.RemoteConfig(conditional_writes=conditional, claim_settle=settle, backoff=0.01)
    barrier.wait()
    out.put(write_result(drt.DatasetRuntime(1), ListSource(name, 300), f"s3://{BUCKET}", writer_config=QUIET,
                         storage_options=opts, remote_config=config))


@pytest.mark.parametrize("conditional", [True, False], ids=["conditional-put", "claim-and-settle"])
def test_of_two_concurrent_writers_exactly_one_publishes(runtime, tmp_path, proxy, conditional):
    name = unique("race")
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_write_in_child, args=(name, options(proxy), conditional, 0.5, barrier, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=150) for _ in procs]
    for p in procs:
        p.join(30)
    wins = [r for r in results if isinstance(r, drt.CacheWriteSuccess)]
    losses = [r for r in results if isinstance(r, drt.CacheWriteError)]
    assert len(wins) == 1 and len(losses) == 1, results
    assert "another writer" in losses[0].message or "already" in losses[0].message
    url = f"s3://{BUCKET}/{name}"
    assert open_cache(url, verify=True, storage_options=options(proxy),
                      remote_config=remote_config(tmp_path)).sample_count == 300


def _killed_at(step: str, name: str, opts: dict) -> str:
    return textwrap.dedent(f"""
        import os, signal
        import torch_drt as drt
        from conftest import ListSource
        from torch_drt.locations import remote_publish
        from torch_drt.locations.remote_store import RemoteStore

        def die(url, step):
            if step == {step!r}:
                os.kill(os.getpid(), signal.SIGKILL)

        remote_publish._reached = die
        if {step!r} == "mid-upload":
            upload, calls = RemoteStore.upload, []

            def upload_then_die(self, local, rel, **kwargs):
                calls.append(rel)
                if len(calls) == 3:
                    os.kill(os.getpid(), signal.SIGKILL)
                return upload(self, local, rel, **kwargs)

            RemoteStore.upload = upload_then_die
        config = drt.RemoteConfig(upload_concurrency=1)
        drt.DatasetRuntime(1).write_cache(ListSource({name!r}, 200), "s3://{BUCKET}",
            writer_config=drt.WriterConfig(show_progress=False, max_shard_bytes=300), storage_options={opts!r},
            remote_config=config)
        print("not killed")
    """)


_SLOW = pytest.mark.slow  # each step is one killed child process; two of them run by default


@pytest.mark.parametrize("step", [pytest.param("claimed", marks=_SLOW), pytest.param("cleaned", marks=_SLOW),
                                  "mid-upload", pytest.param("uploaded", marks=_SLOW), "published"])
def test_a_writer_killed_at_any_step_leaves_nothing_that_opens_and_the_next_one_publishes(runtime, tmp_path, proxy,
                                                                                        step):
    import os

    name = unique(f"killed-{step}")
    url = f"s3://{BUCKET}/{name}"
    tests_dir = os.path.dirname(os.path.dirname(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), tests_dir]),
           "TMPDIR": str(tmp_path)}  # the killed writer's staging directory stays there, not in the shared one
    child = subprocess.run([sys.executable, "-c", _killed_at(step, name, options(proxy))], env=env,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -9 and "not killed" not in child.stdout, child.stderr[-2000:]
    store = RemoteStore(url, options(proxy))
    left = store.list()
    config = remote_config(tmp_path, stale_writer_after=0.5)
    if step == "published":  # the manifest was written: the cache is complete (only the claim is left behind)
        assert open_cache(url, verify=True, storage_options=options(proxy), remote_config=config)
        return
    assert CLAIM_FILE in left and "manifest.json" not in left
    if step in ("mid-upload", "uploaded"):
        assert any(f.startswith("shards/") for f in left)
    with pytest.raises(CacheCorruptError, match="manifest is missing"):
        open_cache(url, storage_options=options(proxy), remote_config=config)
    busy = write_result(runtime, ListSource(name, 200), f"s3://{BUCKET}", writer_config=QUIET,
                        storage_options=options(proxy), remote_config=remote_config(tmp_path))
    assert isinstance(busy, drt.CacheWriteError) and "another writer" in busy.message  # a claim less than 1 h old
    time.sleep(0.6)  # the dead writer's claim is now stale for a writer that waits 0.5 s
    (left_staged,) = tmp_path.glob("torch_drt-publish-*")  # the killed writer's local copy (its TMPDIR)
    config = remote_config(tmp_path, stale_writer_after=0.5, staging_dir=str(tmp_path))
    (result,) = runtime.write_cache(ListSource(name, 60), f"s3://{BUCKET}", writer_config=QUIET,
                                    storage_options=options(proxy), remote_config=config)  # fewer shards than 200
    assert not left_staged.exists() and not list(tmp_path.glob("torch_drt-publish-*"))  # removed, then its own
    assert isinstance(result, drt.CacheWriteSuccess), result
    layout = open_cache(url, verify=True, storage_options=options(proxy), remote_config=config)
    expected = {"manifest.json", "index.bin", "metadata.arrow", *(f"shards/{n}" for n, _ in layout.shards)}
    assert set(store.list()) == expected  # the dead writer's files were cleaned up


def test_from_cache_sources_reuses_a_published_cache(runtime, tmp_path, proxy):
    name = unique("reuse")
    kwargs = dict(reader_config=SEQ, writer_config=QUIET, storage_options=options(proxy),
                  remote_config=remote_config(tmp_path))
    first = runtime.from_cache_sources(ListSource(name, 50), f"s3://{BUCKET}", **kwargs)
    proxy.reset()
    again = runtime.from_cache_sources(ListSource(name, 50), f"s3://{BUCKET}", **kwargs)
    assert proxy.requests["PUT"] == 0
    assert _samples(again) == _samples(first)


class Failing(ListSource):
    def __iter__(self):
        yield from list(super().__iter__())[:5]
        raise RuntimeError("the source broke")


def test_a_failing_source_uploads_nothing(runtime, tmp_path, proxy):
    name = unique("fails")
    result = write_result(runtime, Failing(name, 50), f"s3://{BUCKET}", writer_config=QUIET,
                          storage_options=options(proxy))
    assert isinstance(result, drt.CacheWriteError) and "the source broke" in result.message
    assert RemoteStore(f"s3://{BUCKET}/{name}", options(proxy)).list() == [] and proxy.requests["PUT"] == 0


def test_storages_write_to_and_read_from_urls(tmp_path, proxy):
    from torch_drt.storage import DocumentStorage, DocumentStorageWriter, TokenStreamStorage, TokenStreamWriter

    config = remote_config(tmp_path)
    name = unique("docs")
    with DocumentStorageWriter(f"s3://{BUCKET}", name, dtype="int32", storage_options=options(proxy),
                               remote_config=config) as writer:
        for i in range(40):
            writer.write(np.arange(i % 9 + 1, dtype=np.int32) + i)
    docs = DocumentStorage(f"s3://{BUCKET}/{name}", storage_options=options(proxy), remote_config=config)
    assert [d.tolist() for d in docs.arrays([3, 0, 39])] == [[3, 4, 5, 6], [0], [39, 40, 41, 42]]
    assert docs.lengths().tolist()[:3] == [1, 2, 3]
    stream = unique("tokens")
    staging = tmp_path / "staging"
    staging.mkdir()
    config = remote_config(tmp_path, staging_dir=str(staging))
    with TokenStreamWriter(f"s3://{BUCKET}", stream, dtype="int32", shard_elements=100,
                           storage_options=options(proxy), remote_config=config) as writer:
        writer.write(np.arange(1000))
        assert [p.name[:17] for p in staging.iterdir()] == ["torch_drt-stream-"]  # staged where configured
    assert not list(staging.iterdir())
    tokens = TokenStreamStorage(f"s3://{BUCKET}/{stream}", storage_options=options(proxy), remote_config=config)
    assert tokens.window(95, 10).tolist() == list(range(95, 105)) and tokens.total_elements == 1000
    import pickle

    assert pickle.loads(pickle.dumps(tokens)).window(990, 10).tolist() == list(range(990, 1000))
    with pytest.raises(FileExistsError), TokenStreamWriter(f"s3://{BUCKET}", stream,
                                                           storage_options=options(proxy)) as again:
        again.write(np.arange(5))


def test_a_cache_set_builds_into_s3_and_opens_as_one_dataset(runtime, tmp_path, proxy):
    from torch_drt.build import build_cache_set, split_rows

    rows = [(i, bytes([i % 256]) * (i % 5 + 1)) for i in range(90)]

    def convert(row):
        return drt.CacheInput(row[1], {"i": row[0]})

    name = unique("set")
    config = remote_config(tmp_path)
    report = build_cache_set(split_rows(rows, convert, num_parts=3), f"s3://{BUCKET}", name,
                             writer_config=QUIET, storage_options=options(proxy), remote_config=config)
    assert report.ok and report.path == f"s3://{BUCKET}/{name}", report.summary()
    ds = runtime.cached_dataset(report.path, reader_config=SEQ, storage_options=options(proxy),
                                remote_config=config)
    assert sorted(s.metadata["i"] for s in ds) == list(range(90))
    again = build_cache_set(split_rows(rows, convert, num_parts=3), f"s3://{BUCKET}", name, writer_config=QUIET,
                            exist_ok=True, storage_options=options(proxy), remote_config=config)
    assert again.count("reused") == 3
    with pytest.raises(FileExistsError):
        build_cache_set(split_rows(rows, convert, num_parts=3), f"s3://{BUCKET}", name, writer_config=QUIET,
                        storage_options=options(proxy), remote_config=config)
    body = json.loads(RemoteStore(report.path, options(proxy)).read("cacheset.json"))
    assert [p["path"] for p in body["parts"]] == [f"{name}-{k:05d}" for k in range(3)]
