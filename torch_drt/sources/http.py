"""HttpDataset: item i is the body of a GET of its URL, many requests in flight on one event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from torch_drt.sources._base import DEFAULT_MAX_BYTES, Locations, check_size, make_policy
from torch_drt.sources.retry import parse_retry_after
from torch_drt.sources.template import redact

__all__ = ["HttpDataset"]


class _Retry(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.retry_after = reason, retry_after


class HttpDataset:
    """Bodies of HTTP GET requests, fetched with aiohttp; one client session per event loop keeps connections.

    The loader awaits ``aget(i)`` on its event loop (``num_workers x item_concurrency`` requests in flight) and
    awaits ``aclose()`` when it is dropped; ``ds[i]`` fetches one item, blocking, for scripts and tests.

    Retried: connection errors, time-outs, bodies cut short and HTTP 408, 429, 500, 502, 503, 504 (honouring
    ``Retry-After`` up to ``max_backoff``), with ``backoff * 2**n`` waits and jitter, ``retries`` times at most.
    Other statuses fail at once.

    Args:
        urls: one http(s) URL per item.
        headers: sent with every request (e.g. ``Authorization``).
        timeout: seconds per attempt, body included.
        connect_timeout: seconds to connect.
        retries: further attempts after a transient failure.
        backoff: base wait in seconds.
        max_backoff: longest wait.
        max_bytes: largest accepted body (checked from Content-Length first, then while reading).

    Raises (from ``aget`` / ``ds[i]``):
        OSError: a failed request, with the HTTP status and the attempt count.
        TimeoutError: the last attempt ran out of time.
        ValueError: a body over ``max_bytes``.
        IndexError: an index out of range.
    Messages show URLs without their credentials, query or fragment.
    """

    def __init__(
        self,
        urls: Sequence[str] | Locations,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30,
        connect_timeout: float = 10,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 5,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.locations = urls if isinstance(urls, Locations) else Locations(urls, "url")
        if timeout <= 0 or connect_timeout <= 0:
            raise ValueError(f"{timeout=} and {connect_timeout=} must be > 0")
        self.headers = dict(headers or {})
        self.timeout, self.connect_timeout, self.max_bytes = timeout, connect_timeout, max_bytes
        self.policy = make_policy(retries, backoff, max_backoff, max_bytes)
        self._sessions: dict[int, Any] = {}

    @classmethod
    def from_template(
        cls, template: str, columns: Mapping[str, Any] | None = None, *, length: int | None = None, **options: Any
    ) -> HttpDataset:
        """Item i's URL is ``template`` with item i's column values (str values percent-encoded)."""
        return cls(Locations.from_template(template, columns, "url", length), **options)

    def __len__(self) -> int:
        return len(self.locations)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_sessions"] = {}
        return state

    def _session(self) -> Any:
        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._sessions.get(id(loop))
        if session is None or session.closed:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout)
            connector = aiohttp.TCPConnector(limit=0, loop=loop)
            headers = {"Accept-Encoding": "identity", **self.headers}  # bodies as served: no decoding work
            session = aiohttp.ClientSession(
                headers=headers,
                timeout=timeout,
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
            )
            self._sessions[id(loop)] = session
        return session

    async def _attempt(self, session: Any, url: str) -> bytes:
        async with session.get(url, allow_redirects=True) as response:
            if response.status >= 400:
                if self.policy.transient_status(response.status):
                    raise _Retry(f"HTTP {response.status}", parse_retry_after(response.headers.get("Retry-After")))
                raise OSError(f"GET {redact(url)} failed: HTTP {response.status} {response.reason}")
            if response.content_length is not None and response.content_length > self.max_bytes:
                check_size(response.content_length, self.max_bytes, f"the body of GET {redact(url)} (Content-Length)")
            if response.content_length is not None:  # size known and allowed: one read, no chunk loop
                return await response.read()
            body = bytearray()
            async for chunk in response.content.iter_chunked(1 << 16):
                body += chunk
                if len(body) > self.max_bytes:
                    check_size(len(body), self.max_bytes, f"the body of GET {redact(url)} (so far)")
            return bytes(body)

    async def _fetch(self, session: Any, index: int) -> bytes:
        import aiohttp

        url = self.locations[index]
        attempts = self.policy.attempts
        for attempt in range(attempts):
            retry_after = None
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._attempt(session, url)
            except _Retry as e:
                reason, retry_after = e.reason, e.retry_after
            except TimeoutError:
                if attempt == attempts - 1:
                    raise TimeoutError(
                        f"GET {redact(url)} timed out after {self.timeout}s on attempt {attempt + 1} of {attempts}"
                    ) from None
                reason = "timeout"
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
                reason = type(e).__name__  # no str(e): it can hold the full URL
            except OSError as e:
                raise OSError(f"{e} (attempt {attempt + 1} of {attempts})") from None
            if attempt == attempts - 1:
                raise OSError(f"GET {redact(url)} failed: {reason} after {attempts} attempt(s)")
            await asyncio.sleep(self.policy.delay(attempt, retry_after))
        raise AssertionError("unreachable")

    async def aget(self, index: int) -> bytes:
        """Fetch item ``index`` on the running event loop (the loader's)."""
        return await self._fetch(self._session(), index)

    async def aclose(self) -> None:
        """Close the client session of the running event loop."""
        session = self._sessions.pop(id(asyncio.get_running_loop()), None)
        if session is not None:
            await session.close()

    def __getitem__(self, index: int) -> bytes:
        """Fetch item ``index``, blocking (a private event loop and session for this call)."""

        async def once() -> bytes:
            try:
                return await self.aget(index)
            finally:
                await self.aclose()

        return asyncio.run(once())
