"""A real S3-compatible server (moto's ``ThreadedMotoServer``) on 127.0.0.1, reached through s3fs.

``s3`` is a module-scoped fixture: import it into a test module (``from s3_server import s3_fixture``). It yields the
fsspec options that reach the server; the bucket ``bucket`` holds ``tiles/{0..5}.png`` (``bytes([i]) * (100 + i)``)
and ``tiles/big.bin`` (5,000 bytes).
"""

from __future__ import annotations

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
    pytest.importorskip("moto.server")
    from remote_servers import moto_server

    with moto_server() as endpoint:
        options = {"client_kwargs": {"endpoint_url": endpoint}}
        import s3fs

        fs = s3fs.S3FileSystem(**options)
        if not fs.exists("bucket"):  # moto keeps its buckets per process, across servers
            fs.mkdir("bucket")
        for i in range(6):
            fs.pipe_file(f"bucket/tiles/{i}.png", bytes([i]) * (100 + i))
        fs.pipe_file("bucket/tiles/big.bin", b"z" * 5000)
        yield options
