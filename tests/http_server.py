"""A real aiohttp server on 127.0.0.1 for the HTTP tests and benchmarks, run on its own thread and loop."""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable

from aiohttp import web


def make_app(hits: collections.Counter, delay: float = 0.0, raw_paths: list[str] | None = None) -> web.Application:
    raw_paths = [] if raw_paths is None else raw_paths

    async def item(request: web.Request) -> web.Response:
        hits[request.path] += 1
        if delay:
            await asyncio.sleep(delay)
        n = int(request.match_info["n"])
        size = int(request.query.get("size", "16"))
        return web.Response(body=bytes([n % 256]) * size)

    async def flaky(request: web.Request) -> web.Response:
        hits[request.path] += 1
        if hits[request.path] <= 2:
            return web.Response(status=503, text="try later")
        return web.Response(body=b"finally")

    async def always(request: web.Request) -> web.Response:
        hits[request.path] += 1
        return web.Response(status=int(request.match_info["status"]), reason=request.query.get("reason"))

    async def auth(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer token":
            return web.Response(status=401)
        return web.Response(body=b"secret")

    async def slow(request: web.Request) -> web.Response:
        hits[request.path] += 1
        await asyncio.sleep(float(request.query.get("s", "2")))
        return web.Response(body=b"late")

    async def big(request: web.Request) -> web.StreamResponse:
        size = int(request.query.get("size", "1000"))
        if request.query.get("chunked"):
            response = web.StreamResponse()
            response.enable_chunked_encoding()
            await response.prepare(request)
            for _ in range(size // 100):
                await response.write(b"x" * 100)
            await response.write_eof()
            return response
        return web.Response(body=b"x" * size)

    async def cut(request: web.Request) -> web.StreamResponse:
        hits[request.path] += 1
        response = web.StreamResponse(headers={"Content-Length": "1000"})
        await response.prepare(request)
        await response.write(b"y" * 100)
        request.transport.close()  # the connection dies mid-body
        return response

    async def stall(request: web.Request) -> web.StreamResponse:
        hits[request.path] += 1  # half the body, a pause of s seconds, the other half (chunked=1: no length)
        response = web.StreamResponse(headers={} if request.query.get("chunked") else {"Content-Length": "200"})
        if request.query.get("chunked"):
            response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b"z" * 100)
        for _ in range(int(float(request.query.get("s", "2")) * 20)):
            if request.transport is None or request.transport.is_closing():  # the client gave up waiting
                return response
            await asyncio.sleep(0.05)
        try:
            await response.write(b"z" * 100)
            await response.write_eof()
        except ConnectionError:  # the client gave up waiting
            pass
        return response

    async def retry_after(request: web.Request) -> web.Response:
        hits[request.path] += 1
        if hits[request.path] == 1:
            return web.Response(status=429, headers={"Retry-After": request.query.get("after", "1")})
        return web.Response(body=b"patient")

    async def raw(request: web.Request) -> web.Response:
        raw_paths.append(request.raw_path)  # the request target exactly as it came on the wire
        return web.Response(body=request.raw_path.encode())

    async def redirect(request: web.Request) -> web.Response:
        hits[request.path] += 1  # Location exactly as given (set raw: no URL normalisation on the way out)
        return web.Response(status=302, headers={"Location": request.query["to"]})

    async def redirect_loop(request: web.Request) -> web.Response:
        hits[request.path] += 1
        return web.Response(status=302, headers={"Location": f"{request.path}?token={request.query.get('token', '')}"})

    app = web.Application()
    app.add_routes([
        web.get("/item/{n}", item), web.get("/flaky/{key}", flaky), web.get("/status/{status}", always),
        web.get("/auth", auth), web.get("/slow", slow), web.get("/big", big), web.get("/cut", cut),
        web.get("/stall", stall), web.get("/retry-after/{key}", retry_after), web.get("/raw/{tail:.*}", raw),
        web.get("/redirect", redirect), web.get("/redirect-loop/{key}", redirect_loop),
    ])
    return app


class Server:
    """Starts the app on a free port of 127.0.0.1; ``url(path)``; ``hits`` counts requests per path; ``raw_paths``
    lists the raw request targets (path and query as sent) that reached ``/raw/...``. ``app`` serves another
    application instead (made on the server's thread: ``app()``).
    """

    def __init__(self, delay: float = 0.0, app: Callable[[], web.Application] | None = None) -> None:
        self.hits: collections.Counter = collections.Counter()
        self.raw_paths: list[str] = []
        self._app = app
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(delay,), daemon=True, name="test-http-server")
        self._error: BaseException | None = None
        self._thread.start()
        if not self._ready.wait(60) or self._error is not None:
            raise RuntimeError("the test HTTP server did not start") from self._error

    def _run(self, delay: float) -> None:
        try:
            asyncio.set_event_loop(self._loop)
            app = make_app(self.hits, delay, self.raw_paths) if self._app is None else self._app()
            runner = web.AppRunner(app, access_log=None)
            self._loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
        except BaseException as e:  # told to the constructor, which raises it
            self._error = e
            self._ready.set()
            raise
        self._runner = runner
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def serve_forever(port_file: str, delay: float) -> None:
    """Entry point for a server in its own process (benchmarks): writes its port, then serves."""
    import time
    from pathlib import Path

    server = Server(delay)
    Path(port_file).write_text(str(server.port))
    while True:
        time.sleep(3600)
