"""The index and metadata fetched with a manifest (``_open_reads``) are in the node cache, under their own XXH3-128,
by the time the manifest read returns: the node's other processes, which wait for that manifest's copy, find them
there (the copies are written at once, on threads the read joins before it returns)."""

from __future__ import annotations

import os
import uuid

import fsspec

from torch_drt.checksums import xxh3_128_hex
from torch_drt.locations._open_reads import OpenReads
from torch_drt.locations.remote_store import RemoteStore
from torch_drt.nodecache.node_cache import NodeCache


def test_the_copies_fetched_with_a_manifest_are_in_the_node_cache_when_it_returns(tmp_path):
    root = f"memory://open-reads-{uuid.uuid4().hex}"
    fs = fsspec.filesystem("memory")
    for round_ in range(3):
        files = {"manifest.json": b'{"round": %d}' % round_, "index.bin": os.urandom(400_000),
                 "metadata.arrow": os.urandom(150_000), "other.bin": os.urandom(100_000)}
        for rel, data in files.items():
            fs.pipe(f"{root}/{rel}", data)
        node = NodeCache(tmp_path / f"node-{round_}", 1 << 30)
        also = ["index.bin", "metadata.arrow", "other.bin"]
        got = OpenReads().fetch_with(RemoteStore(root), "manifest.json", 1 << 20, also, node)
        assert got == files["manifest.json"]
        for rel in also:
            data = files[rel]
            key = f"xxh3_128-{xxh3_128_hex(data)}"
            assert node.has(key, len(data)), rel
            assert node.path(key).read_bytes() == data
