"""The fsspec options a RemoteStore opens its client with: the config's time-outs, the client's own retries off,
and for S3 this process's aiobotocore session, which shares one parsed service model with forked children.

A new s3fs client in a fresh aiobotocore session parses botocore's service model first (100-250 ms of CPU), and
every loading worker makes its own client. One session per process, whose data loader (the parsed models) is the
one the first session loaded, makes a forked worker's first request cost about 50 ms instead. The session is made
anew in each process (its credential state is not shared); only the loader, a cache of parsed files, is inherited.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from torch_drt.locations.remote_config import RemoteConfig

_S3_OPTIONS = frozenset({  # s3fs options that leave its aiobotocore session as made (see s3_session)
    "anon", "key", "secret", "token", "endpoint_url", "use_ssl", "client_kwargs", "requester_pays",
    "default_block_size", "default_fill_cache", "default_cache_type", "version_aware", "config_kwargs",
    "s3_additional_kwargs", "use_listings_cache", "listings_expiry_time", "max_paths", "asynchronous",
    "skip_instance_cache", "cache_regions", "max_concurrency", "fixed_upload_size",
})

_LOCK = threading.Lock()
_SESSION: dict[int, Any] = {}  # pid -> the session of that process
_LOADER: list[Any] = []  # the data loader of the first session made (inherited by forked children)


def _after_fork() -> None:  # a lock held by a thread of the parent would never be released in the child
    global _LOCK
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def _s3_session() -> Any:
    """This process's aiobotocore session (made on first use), with the shared data loader."""
    pid = os.getpid()
    with _LOCK:
        session = _SESSION.get(pid)
        if session is None:
            from aiobotocore.session import AioSession

            session = AioSession()
            if _LOADER:
                session.register_component("data_loader", _LOADER[0])
            else:
                _LOADER.append(session.get_component("data_loader"))
            _SESSION.clear()
            _SESSION[pid] = session
        return session


def client_options(scheme: str, options: Mapping[str, Any], config: RemoteConfig) -> dict[str, Any]:
    """The fsspec options with this config's time-outs, and the client's own retries off (retry.py retries)."""
    out = dict(options)
    if scheme in ("s3", "s3a"):
        if not set(out) - _S3_OPTIONS:  # no session of the caller's, nor options only a session of its own takes
            out["session"] = _s3_session()
        kwargs = dict(out.get("config_kwargs") or {})
        kwargs.setdefault("connect_timeout", config.connect_timeout)
        kwargs.setdefault("read_timeout", config.timeout)
        kwargs.setdefault("retries", {"max_attempts": 1, "mode": "standard"})
        out["config_kwargs"] = kwargs
    elif scheme in ("http", "https"):
        import aiohttp

        client = dict(out.get("client_kwargs") or {})
        timeout = aiohttp.ClientTimeout(sock_connect=config.connect_timeout, sock_read=config.timeout)
        client.setdefault("timeout", timeout)
        out["client_kwargs"] = client
    return out
