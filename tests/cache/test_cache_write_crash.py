"""A writer killed (SIGKILL) at any step of a cache write leaves the old state or the complete new cache."""

from __future__ import annotations

import json

from conftest import run_isolated

# One interpreter imports the writer once, then forks one writer per kill point: a writer that SIGKILLs itself while
# the source yields a given record, right before its k-th fsync (every one of them: shards, index, metadata,
# manifest, directories, the publish's), or right after the publishing rename. After each, the parent checks that the
# cache is absent or opens with every checksum verified and every record right, then rewrites it with mode="reuse".
_KILLS = """
import json, os, shutil, signal, sys
from pathlib import Path

from torch_drt.cache.config import WriterConfig
from torch_drt.cache.records import CacheInput, CacheWriteSuccess
from torch_drt.cache.validate import open_cache
from torch_drt.cache.writer import write_source

ROOT, N = Path(sys.argv[1]), 40
CONFIG = WriterConfig(show_progress=False, max_shard_bytes=12_000)


def payload(i):
    return bytes([i % 251]) * (900 + i)


class Source:
    name = "c"

    def __init__(self, kill_at_record=-1):
        self.kill_at_record = kill_at_record

    def __iter__(self):
        for i in range(N):
            if i == self.kill_at_record:
                os.kill(os.getpid(), signal.SIGKILL)
            yield CacheInput(payload(i), {"i": i})


def writer(kill):  # in the forked child: write, killing itself at the point named by kill
    kind, at = kill
    calls = [0]
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        calls[0] += 1
        if kind == "fsync" and calls[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)
        real_fsync(fd)

    def rename(src, dst, *args, **kwargs):
        real_rename(src, dst, *args, **kwargs)
        if kind == "rename":
            os.kill(os.getpid(), signal.SIGKILL)

    os.fsync, os.rename = fsync, rename
    result = write_source(Source(at if kind == "record" else -1), ROOT, CONFIG)
    print(json.dumps({"fsyncs": calls[0]}), flush=True)
    os._exit(0 if isinstance(result, CacheWriteSuccess) else 1)


def run(kill):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(write, 1)
        writer(kill)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out


def state():
    target = ROOT / "c"
    if not target.exists():
        return "absent"
    layout = open_cache(target, verify=True)  # every shard's SHA-256 and every record's checksum
    assert layout.sample_count == N, layout.sample_count
    return "complete"


code, out = run(("none", 0))
assert code == 0, (code, out)
fsyncs = json.loads(out)["fsyncs"]
shutil.rmtree(ROOT / "c")
kills = [("record", 0), ("record", 20), ("record", N - 1)] + [("fsync", k) for k in range(1, fsyncs + 1)]
kills.append(("rename", 0))
for kill in kills:
    code, _ = run(kill)
    found = state()
    again = write_source(Source(), ROOT, CONFIG, mode="reuse")
    assert isinstance(again, CacheWriteSuccess) and open_cache(ROOT / "c", verify=True).sample_count == N, again
    left = sorted(p.name for p in ROOT.iterdir() if p.name.startswith(".staging-"))
    print(json.dumps({"kill": kill, "exit": code, "found": found, "staging_left": left}), flush=True)
    shutil.rmtree(ROOT / "c")
"""


def test_a_writer_killed_at_any_step_leaves_no_cache_or_the_complete_one(tmp_path):
    proc = run_isolated(_KILLS.replace("sys.argv[1]", repr(str(tmp_path))), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    # 4 shards, index, metadata, manifest, 2 directories (the staging one synced once, with the files), the root
    assert len(rows) >= 3 + 10 + 1, rows
    assert all(row["exit"] == -9 for row in rows), rows  # each writer died where it was told to
    found = {tuple(row["kill"]): row["found"] for row in rows}
    assert found[("record", 39)] == "absent" and found[("rename", 0)] == "complete", found
    assert found[("fsync", 1)] == "absent", found  # the first shard's sync: long before the publish
    assert all(row["staging_left"] == [] for row in rows), rows  # the rewrite removed the dead writer's staging
