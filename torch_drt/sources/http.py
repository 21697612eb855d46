"""HttpDataset: item i is the body of a GET of its URL, many requests in flight on one event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import Any

from torch_drt._inherited_clients import made
from torch_drt.sources._base import DEFAULT_MAX_BYTES, LocatedDataset, check_size, check_timeout
from torch_drt.sources._deadlines import Deadlines
from torch_drt.sources._locations import Locations
from torch_drt.sources._urls import redact, wire_url
from torch_drt.sources.retry import AttemptError, parse_retry_after, transient_status


def _phrase(status: int) -> str:
    """The standard reason phrase of ``status`` (a server's own phrase can echo the request, token and all)."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _status_error(status: int, headers: Any) -> AttemptError:
    """The failed attempt of an HTTP error status (the reason is the standard phrase: never the server's text)."""
    transient = transient_status(status)
    retry_after = parse_retry_after(headers.get("Retry-After")) if transient else None
    return AttemptError(f"HTTP {status} {_phrase(status)}".rstrip(), transient=transient, retry_after=retry_after)


class HttpDataset(LocatedDataset):
    """Bodies of HTTP GET requests, fetched with aiohttp; one client session per event loop keeps connections.

    The loader awaits ``aget(i)`` on its event loop (``num_workers x item_concurrency`` requests in flight) and
    awaits ``aclose()`` when it is dropped; ``ds[i]`` fetches one item, blocking, for scripts and tests.

    Each URL is requested exactly as built: its path and query go on the wire byte for byte (``%26`` stays
    ``%26``, so signed URLs keep their signature), and so do redirect targets; only characters a URL cannot hold
    (spaces, non-ASCII) are percent-encoded. Redirects are followed (10 at most).

    Retried (``sources.retry.is_transient``): connection errors, time-outs, bodies cut short and HTTP 408, 429,
    500, 502, 503, 504 (honouring ``Retry-After`` up to ``max_backoff``), with ``backoff * 2**n`` waits and
    jitter, ``retries`` times at most. Anything else fails at once.

    Args:
        urls: one http(s) URL (a str) per item; a single str is refused (``TypeError``).
        headers: sent with every request (e.g. ``Authorization``); never shown in a repr or a message.
        timeout: seconds per attempt, body included.
        connect_timeout: seconds to connect.
        retries: further attempts after a transient failure.
        backoff: base wait in seconds.
        max_backoff: longest wait.
        max_bytes: largest accepted body (checked from Content-Length first, then while reading).

    Raises (from ``aget`` / ``ds[i]``):
        OSError: a failed request (an HTTP status, a refused connection, a redirect loop or a redirect to a
            non-http URL), with the attempt count.
        TimeoutError: the last attempt ran out of time.
        ValueError: a body over ``max_bytes``; a URL that is not http(s) with a valid host; credentials both in
            the URL and in an ``Authorization`` header.
        TypeError: an index that is not an int.
        IndexError: an index out of range.
    Messages, reprs and logs show URLs without their credentials, query or fragment, and no header values.
    """

    kind = "url"
    timeout: float  # never None here (refused in __init__)

    def __init__(
        self,
        urls: Iterable[str] | Locations,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30,
        connect_timeout: float = 10,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if timeout is None:
            raise ValueError("timeout=None: an HTTP request needs a time limit (seconds per attempt)")
        super().__init__(
            urls, timeout=timeout, retries=retries, backoff=backoff, max_backoff=max_backoff, max_bytes=max_bytes
        )
        check_timeout("connect_timeout", connect_timeout)
        headers = dict(headers or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise TypeError("headers must map str names to str values")
        self.headers, self.connect_timeout = headers, connect_timeout
        self._authorized = any(k.lower() == "authorization" for k in headers)
        self._sessions: dict[int, tuple[Any, Deadlines]] = {}  # by id(loop): its client session and time limits

    @classmethod
    def from_template(
        cls, template: str, columns: Mapping[str, Any] | None = None, *, length: int | None = None, **options: Any
    ) -> HttpDataset:
        """Item i's URL is ``template`` with item i's column values (str values percent-encoded)."""
        return cls(Locations.from_template(template, columns, "url", length), **options)

    def _repr_args(self) -> list[str]:
        return [*super()._repr_args(), f"headers={sorted(self.headers)}"]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_sessions"] = {}
        return state

    def _session(self) -> tuple[Any, Deadlines]:
        """The running loop's client session and the time limits of its attempts (made on first use)."""
        loop = asyncio.get_running_loop()
        client = self._sessions.get(id(loop))
        if client is None or client[0].closed:
            import aiohttp

            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout)  # the total: Deadlines
            connector = aiohttp.TCPConnector(limit=0, loop=loop)
            headers = {"Accept-Encoding": "identity", **self.headers}  # bodies as served: no decoding work
            session = made(aiohttp.ClientSession(  # a forked child keeps it alive, unused (_inherited_clients)
                headers=headers,
                timeout=timeout,
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                requote_redirect_url=False,  # a redirect target goes on the wire as the server wrote it
            ))
            client = self._sessions[id(loop)] = (session, Deadlines(self.timeout))
        return client

    async def _attempt(self, session: Any, deadlines: Deadlines, url: Any) -> bytes:
        """One GET within ``timeout`` seconds: the body (one read into bytes when its size is known), else a
        failed ``AttemptError``."""
        task = deadlines.start()
        try:
            async with session.get(url, allow_redirects=True) as response:
                if response.status >= 400:
                    raise _status_error(response.status, response.headers)
                length = response.content_length
                check_size(length, self.max_bytes, "the body (Content-Length)")
                if length is not None:  # size known and allowed: one read into bytes, no chunk loop
                    return await response.read()
                return await self._chunked(response)
        except asyncio.CancelledError:
            if not deadlines.expired(task):
                raise
        finally:
            deadlines.stop(task)
        raise AttemptError(f"timed out after {self.timeout}s", transient=True, kind=TimeoutError)

    async def _chunked(self, response: Any) -> bytes:
        """A body of unknown size, read in chunks up to ``max_bytes``."""
        body = bytearray()
        async for chunk in response.content.iter_chunked(1 << 16):
            body += chunk
            check_size(len(body), self.max_bytes, "the body (so far)")
        return bytes(body)

    async def aget(self, index: int) -> bytes:
        """Fetch item ``index`` on the running event loop (the loader's)."""
        url = self.locations[index]
        wire = wire_url(url)
        if self._authorized and (wire.user is not None or wire.password is not None):
            raise ValueError(f"GET {redact(url)}: credentials both in the URL and in an Authorization header: give one")
        session, deadlines = self._session()
        try:  # the first attempt outside the retry loop: an item that succeeds at once pays nothing for it
            return await self._attempt(session, deadlines, wire)
        except Exception as error:
            failed = error
        return await self.policy.arun(
            lambda: self._attempt(session, deadlines, wire), lambda: f"GET {redact(url)}", failed
        )

    async def aclose(self) -> None:
        """Close the client session of the running event loop."""
        client = self._sessions.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            client[1].close()
            await client[0].close()
            await asyncio.sleep(0)  # the closed connections' transports finish closing on the next loop turn

    def __getitem__(self, index: int) -> bytes:
        """Fetch item ``index``, blocking (a private event loop and session for this call)."""

        async def once() -> bytes:
            try:
                return await self.aget(index)
            finally:
                await self.aclose()

        return asyncio.run(once())
