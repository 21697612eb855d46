"""The object store of the remote benchmarks: moto and a proxy that adds latency to every request, each in its own
process (``tests/remote_servers.py``: they do not share the measured interpreter), and the fsspec options that reach
them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from _common import ROOT

S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


class Servers:
    """moto and the latency proxy, each in its own process (they do not share the measured interpreter)."""

    def __init__(self, work: Path, latency: float) -> None:
        script, self.procs = str(ROOT / "tests" / "remote_servers.py"), []
        env = {**os.environ, **S3_ENV}
        self.endpoint = self._start([sys.executable, script, "moto", str(work / "moto.port")], work / "moto.port", env)
        self.proxy = self._start([sys.executable, script, "proxy", self.endpoint, str(work / "proxy.port"),
                                  "--latency", str(latency)], work / "proxy.port", env)

    def _start(self, command: list[str], port_file: Path, env: dict) -> str:
        self.procs.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.time() + 60
        while not port_file.exists() or not port_file.read_text():
            if time.time() > deadline:
                raise RuntimeError(f"{command[2]} did not start")
            time.sleep(0.05)
        return f"http://127.0.0.1:{port_file.read_text()}"

    def stats(self, reset: bool = False) -> dict:
        request = urllib.request.Request(f"{self.proxy}/{'__reset' if reset else '__stats'}",
                                         method="POST" if reset else "GET")
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def options(endpoint: str) -> dict:
    return {"client_kwargs": {"endpoint_url": endpoint}}


def start_s3(work: Path, latency: float, bucket: str) -> Servers:
    """moto and the proxy (``latency`` seconds per request) started under ``work``, with moto's test credentials in
    this process's environment and ``bucket`` made; the caller stops them (``Servers.stop``)."""
    os.environ.update(S3_ENV)
    servers = Servers(work, latency)
    try:
        import s3fs

        s3fs.S3FileSystem(**options(servers.endpoint)).mkdir(bucket)
    except BaseException:
        servers.stop()
        raise
    return servers


@contextlib.contextmanager
def s3_session(prefix: str, latency: float, bucket: str) -> Iterator[tuple[Servers, Path]]:
    """``start_s3`` in a new temporary directory named ``prefix...``: ``(servers, that directory)``, both stopped and
    removed on exit."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        servers = start_s3(work, latency, bucket)
        try:
            yield servers, work
        finally:
            servers.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
