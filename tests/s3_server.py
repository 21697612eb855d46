"""A real S3-compatible server (moto's ``ThreadedMotoServer``) on 127.0.0.1, reached through s3fs.

``s3`` is a module-scoped fixture: import it into a test module (``from s3_server import s3_fixture``). It yields the
fsspec options that reach the server; the bucket ``bucket`` holds ``tiles/{0..5}.png`` (``bytes([i]) * (100 + i)``)
and ``tiles/big.bin`` (5,000 bytes).
"""

from __future__ import annotations

import os
import socket

import pytest


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", name="s3")
def s3_fixture():
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    options = {"client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    if not fs.exists("bucket"):  # moto keeps its buckets per process, across servers
        fs.mkdir("bucket")
    for i in range(6):
        fs.pipe_file(f"bucket/tiles/{i}.png", bytes([i]) * (100 + i))
    fs.pipe_file("bucket/tiles/big.bin", b"z" * 5000)
    yield options
    server.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
