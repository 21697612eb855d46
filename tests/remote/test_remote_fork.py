"""A process forked from one that reads a cache at a URL (a loading worker, any ``fork`` child) must leave the
parent's store client alone: the parent keeps reading at full speed, and the child prints nothing about it.

The hazard is real: an fsspec/aiohttp client shares its event loop's epoll instance with a forked child, and a
child that closes the inherited client (its finalizer runs when the child drops it) unregisters the parent's
pooled sockets from that epoll. The parent's next request on such a socket then waits for its time-out. The
requests go through the proxy (an aiohttp server) because it keeps connections alive, as real stores do.
"""

from __future__ import annotations

from remote_fixtures import moto_fixture, options, proxy_fixture, publish_local, remote_config  # noqa: F401
from script_runner import run_script


def test_a_forked_child_leaves_the_parents_store_client_working(runtime, tmp_path, moto_endpoint, proxy):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=50)
    config = remote_config(tmp_path, timeout=2.0, retries=0)
    result = run_script(f"""
        import gc, os, time
        import fsspec.asyn
        import torch_drt as drt
        from torch_drt.cache import open_cache

        config = drt.RemoteConfig(**{config.__dict__!r})
        layout = open_cache({url!r}, storage_options={options(proxy)!r}, remote_config=config)
        backend = layout.backend
        for _ in range(3):
            backend.size("index.bin")  # the parent's client holds a pooled connection now

        async def collect():  # the child's garbage collection running on its own IO thread (as it often does)
            global inherited
            inherited = None
            gc.collect()

        for _ in range(3):
            inherited = backend.store.fs  # the parent's client, as the child inherits it
            pid = os.fork()
            if pid == 0:  # a child reading on its own client, as a loading worker does, then collecting garbage
                backend.size("index.bin")
                fsspec.asyn.sync(fsspec.asyn.get_loop(), collect)
                os._exit(0)
            os.waitpid(pid, 0)
            for _ in range(3):
                t = time.perf_counter()
                backend.size("index.bin")
                assert time.perf_counter() - t < 1.5, "the parent's request waited for its time-out (2 s)"
        print("parent ok")
    """, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "parent ok" in result.stdout
    assert "Traceback" not in result.stderr and "different loop" not in result.stderr, result.stderr[-3000:]


def test_a_forked_child_does_not_parse_the_s3_service_model_again(runtime, tmp_path, moto_endpoint):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=50)
    config = remote_config(tmp_path)
    result = run_script(f"""
        import os
        import botocore.loaders
        import torch_drt as drt
        from torch_drt.cache import open_cache

        loads = []
        parse = botocore.loaders.JSONFileLoader.load_file
        botocore.loaders.JSONFileLoader.load_file = lambda self, path: loads.append(path) or parse(self, path)
        config = drt.RemoteConfig(**{config.__dict__!r})
        options = {{"client_kwargs": {{"endpoint_url": {moto_endpoint!r}}}}}
        layout = open_cache({url!r}, storage_options=options, remote_config=config)
        layout.backend.size("index.bin")
        assert loads, "the parent parses the model"
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # a loading worker: its own client, its first request
            loads.clear()
            layout.backend.size("index.bin")
            os.write(write, repr(loads).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print("child parsed", os.read(read, 1 << 16).decode())
    """, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "child parsed []" in result.stdout, result.stdout


def test_threads_of_a_forked_child_asking_at_once_all_get_the_childs_own_client(runtime, tmp_path, moto_endpoint):
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=50)
    config = remote_config(tmp_path)
    result = run_script(f"""
        import os, threading
        import torch_drt as drt
        from torch_drt.cache import open_cache

        config = drt.RemoteConfig(**{config.__dict__!r})
        options = {{"client_kwargs": {{"endpoint_url": {moto_endpoint!r}}}}}
        store = open_cache({url!r}, storage_options=options, remote_config=config).backend.store
        parent = id(store.fs)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # a loading worker's download threads start at once
            barrier, got = threading.Barrier(8), []
            def ask():
                barrier.wait()
                got.append(id(store.fs))
            threads = [threading.Thread(target=ask) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            os.write(write, f"{{len(set(got))}} {{parent in got}}".encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print("clients, parent's among them:", os.read(read, 100).decode())
    """, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "clients, parent's among them: 1 False" in result.stdout, result.stdout


def test_a_forked_child_lets_go_of_the_shards_its_parent_mapped(runtime, tmp_path, moto_endpoint, proxy):
    """A child inherits the descriptors of its parent's maps, and with them their locks: once the parent unmaps a
    shard the node cache may evict it, whatever children the parent forked meanwhile (loading workers)."""
    _, url = publish_local(runtime, tmp_path, moto_endpoint, n=60, max_shard_bytes=200)
    config = remote_config(tmp_path, open_shards=64)
    result = run_script(f"""
        import os, time
        from pathlib import Path
        import torch_drt as drt
        from torch_drt.nodecache._node_files import remove_unused

        config = drt.RemoteConfig(**{config.__dict__!r})
        ds = drt.DatasetRuntime(1).cached_dataset({url!r}, storage_options={options(proxy)!r}, remote_config=config,
                                                  reader_config=drt.ReaderConfig(seed=0, shuffle=False))
        assert sum(1 for _ in ds) == 60  # every shard read, and mapped (open_shards is larger)
        r, w = os.pipe()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # a child that reads nothing and lives on
            os.close(w)
            os.write(ready_w, b"1")  # (once it runs, its at-fork handlers have run)
            os.read(r, 1)
            os._exit(0)
        os.read(ready_r, 1)
        keys = [f.key for f in ds.reader._caches[0].shards]
        ds.layouts[0].backend.prefetcher.update([])  # the parent lets go of everything: no plan holds a shard...
        ds.reader.close()  # ... and no map
        data = Path({str(tmp_path / "node-cache")!r}) / "data"
        try:
            stuck = [k for k in keys if not remove_unused(data / k)]
        finally:
            os.close(w)
            os.waitpid(pid, 0)
        assert not stuck, f"{{len(stuck)}} of {{len(keys)}} shards still locked by the child"
        print("ok")
    """, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
