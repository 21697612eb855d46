"""Real servers for the remote-cache tests and benchmark: moto's S3 server, a static HTTP server with byte ranges,
and a fault-injecting HTTP proxy in front of either (latency per request, 503 storms, credential checks, counts).

In-process: ``ThreadedApp`` runs an aiohttp app on its own thread; ``FaultProxy(upstream)``; ``StaticServer(root)``;
``moto_server()`` (a context manager yielding its endpoint). As processes (benchmarks, so the servers do not share
the measured interpreter): ``python tests/remote_servers.py moto PORT_FILE`` and
``python tests/remote_servers.py proxy UPSTREAM PORT_FILE --latency 0.02`` (the proxy writes its port, then
serves; ``GET /__stats`` returns its counters as JSON and ``POST /__reset`` zeroes them).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web
from s3_server import free_port

S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
_HOP = {"host", "content-length", "transfer-encoding", "connection", "expect", "keep-alive"}
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


class ThreadedApp:
    """Serves an aiohttp app on a free port of 127.0.0.1 from its own thread and event loop."""

    def __init__(self, app: web.Application) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(app,), daemon=True, name="test-remote-server")
        self._thread.start()
        if not self._ready.wait(20):
            raise RuntimeError("the server did not start")

    def _run(self, app: web.Application) -> None:
        asyncio.set_event_loop(self._loop)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _s3_error(status: int, code: str, message: str) -> web.Response:
    body = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message></Error>'
    return web.Response(status=status, body=body.encode(), content_type="application/xml")


class FaultProxy:
    """An HTTP proxy in front of ``upstream`` that adds ``latency`` seconds to every request and can fail requests.

    Attributes:
        latency: seconds each request waits before it is forwarded.
        storm: the next ``storm`` requests get 503 SlowDown (counted down as they come).
        allowed_keys: when set, a request signed with another access key gets 403 InvalidAccessKeyId (as S3 does).
        requests: requests forwarded, by method; ``gets`` by path; ``bytes_out`` response body bytes of GETs;
            ``ranges`` the Range header of each GET, by path; ``puts`` the paths written, in order;
            ``max_gets_at_once`` the most GETs being served at one time (latency included); ``timeline`` each
            GET as (arrived, answered, path, Range header, body bytes), in seconds of ``time.monotonic()``.
    """

    def __init__(self, upstream: str, latency: float = 0.0, serve: bool = True) -> None:
        self.upstream = upstream.rstrip("/")
        self.latency = latency
        self.storm = 0
        self.failed = 0
        self.allowed_keys: set[str] | None = None
        self.reset()
        self._session: ClientSession | None = None
        self.server = ThreadedApp(self.app()) if serve else None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def reset(self) -> None:
        """Zero the counters."""
        self.requests: collections.Counter = collections.Counter()
        self.gets: collections.Counter = collections.Counter()
        self.ranges: collections.defaultdict = collections.defaultdict(list)
        self.puts: list[str] = []
        self.bytes_out = 0
        self.gets_now = 0
        self.max_gets_at_once = 0
        self.timeline: list[tuple[float, float, str, str, int]] = []

    def stats(self) -> dict:
        return {"requests": dict(self.requests), "bytes_out": self.bytes_out, "failed": self.failed,
                "gets": dict(self.gets), "ranges": dict(self.ranges), "max_gets_at_once": self.max_gets_at_once,
                "timeline": self.timeline}

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 34)
        app.router.add_get("/__stats", self._stats)
        app.router.add_post("/__reset", self._reset)
        app.router.add_route("*", "/{tail:.*}", self.forward)
        return app

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({})

    async def forward(self, request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            return await self._forward(request)
        self.gets_now += 1
        self.max_gets_at_once = max(self.max_gets_at_once, self.gets_now)
        arrived = time.monotonic()
        try:
            response = await self._forward(request)
        finally:
            self.gets_now -= 1
        size = response.content_length or 0
        self.timeline.append((arrived, time.monotonic(), request.path, request.headers.get("Range", ""), size))
        return response

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        if self.storm > 0:
            self.storm -= 1
            self.failed += 1
            return _s3_error(503, "SlowDown", "Please reduce your request rate.")
        if self.allowed_keys is not None:
            found = _CREDENTIAL.search(request.headers.get("Authorization", ""))
            if found is None or found.group(1) not in self.allowed_keys:
                return _s3_error(403, "InvalidAccessKeyId", "The AWS Access Key Id does not exist in our records.")
        if self._session is None:
            self._session = ClientSession(
                connector=TCPConnector(limit=0), timeout=ClientTimeout(total=None), auto_decompress=False
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        headers["Host"] = request.headers.get("Host", "")
        body = await request.read()
        async with self._session.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=body or None, allow_redirects=False
        ) as upstream:
            data = await upstream.read()
            out = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
            self.requests[request.method] += 1
            if request.method == "GET":
                self.gets[request.path] += 1
                self.ranges[request.path].append(request.headers.get("Range", ""))
                self.bytes_out += len(data)
            elif request.method == "PUT" and upstream.status < 300:
                self.puts.append(request.path)
            if request.method == "HEAD":
                response = web.StreamResponse(status=upstream.status, headers=out)
                response.content_length = int(upstream.headers.get("Content-Length", "0"))
                await response.prepare(request)
                return response
            return web.Response(status=upstream.status, body=data, headers=out)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


class StaticServer:
    """Files under ``root`` over HTTP (GET and HEAD with byte ranges, 404 for missing files)."""

    def __init__(self, root: Path) -> None:
        app = web.Application()
        app.router.add_static("/", str(root), show_index=False)
        self.server = ThreadedApp(app)
        self.url = self.server.url

    def stop(self) -> None:
        self.server.stop()


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (the AWS_* test credentials set meanwhile); yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    old = {k: os.environ.get(k) for k in S3_ENV}
    os.environ.update(S3_ENV)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def s3_options(endpoint: str) -> dict:
    """s3fs options that reach ``endpoint`` (a fresh filesystem instance, so proxies and keys do not leak)."""
    return {"client_kwargs": {"endpoint_url": endpoint}, "skip_instance_cache": True}


def make_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` unless it exists (moto keeps buckets per process)."""
    import s3fs

    fs = s3fs.S3FileSystem(**s3_options(endpoint))
    if not fs.exists(bucket):
        fs.mkdir(bucket)


def upload_tree(local: Path, endpoint: str, prefix: str) -> None:
    """Copy every file under ``local`` to ``s3://prefix/...`` (a cache published by hand), a ``put_object`` each
    through a plain boto3 client (moto's dependency): s3fs's ``put_file`` cost three times as much per file here,
    and the remote tests publish dozens of caches of tens of files."""
    import boto3

    bucket, _, key = prefix.partition("/")
    client = boto3.client("s3", endpoint_url=endpoint, region_name=S3_ENV["AWS_DEFAULT_REGION"],
                          aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"])
    try:
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            name = path.relative_to(local).as_posix()
            client.put_object(Bucket=bucket, Key=f"{key}/{name}" if key else name, Body=path.read_bytes())
    finally:
        client.close()


def _serve(kind: str, args: argparse.Namespace) -> None:
    if kind == "moto":
        from moto.server import ThreadedMotoServer

        port = free_port()
        ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False).start()
    else:
        port = FaultProxy(args.upstream, args.latency).server.port
    Path(args.port_file).write_text(str(port))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["moto", "proxy"])
    parser.add_argument("rest", nargs="+", help="moto: PORT_FILE; proxy: UPSTREAM PORT_FILE")
    parser.add_argument("--latency", type=float, default=0.0)
    ns = parser.parse_args()
    if ns.kind == "proxy":
        ns.upstream, ns.port_file = ns.rest
    else:
        (ns.port_file,) = ns.rest
    json.dump({"pid": os.getpid()}, sys.stdout)
    _serve(ns.kind, ns)
