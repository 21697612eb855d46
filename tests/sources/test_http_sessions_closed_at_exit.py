"""A loader over HttpDataset leaves no aiohttp session, connector or transport open at exit (no ResourceWarning),
whether it was iterated to the end or stopped early, dropped or still alive when the interpreter exits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from http_server import Server

ROOT = Path(__file__).resolve().parents[2]

CLIENT = textwrap.dedent(
    """
    import gc, sys
    import torch_drt as drt
    from torch_drt.sources import HttpDataset

    port, method, stop_early, keep = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
    dataset = HttpDataset([f"http://127.0.0.1:{port}/item/{i}" for i in range(64)])
    assert dataset[3] == bytes([3]) * 16  # a blocking fetch on its own loop
    loader = drt.StatefulDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=list, worker_method=method)
    for i, batch in enumerate(loader):
        if stop_early and i == 2:
            break
    print("batches", i + 1)
    if not keep:  # else the loader is still alive when the interpreter exits
        del loader, batch
        gc.collect()
    """
)


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.mark.matrix  # each way of leaving a loader, in a covering third by default
@pytest.mark.parametrize(
    ("method", "stop_early", "keep"),
    [("thread", True, True), ("thread", False, True), ("thread", True, False), ("thread", False, False),
     ("process", True, True)],
    ids=["thread-stopped-early-alive-at-exit", "thread-to-the-end-alive-at-exit", "thread-stopped-early-dropped",
         "thread-to-the-end-dropped", "process-stopped-early-alive-at-exit"],
)
def test_no_resource_warning_at_exit(server, tmp_path, method, stop_early, keep):
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "error::ResourceWarning"}
    proc = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", str(script), str(server.port), method,
         str(int(stop_early)), str(int(keep))],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"batches {3 if stop_early else 16}"
    assert proc.stderr == "", proc.stderr[-3000:]
