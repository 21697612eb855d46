"""Conditional writes on a RemoteStore: an object's version, and a write or delete done only while it is that version.

On S3 a version is the object's ETag and the condition travels with the request (``If-Match``, ``If-None-Match``):
the store itself refuses a write whose condition no longer holds, so two writers can never both succeed. On other
stores a version is the SHA-256 of the object's bytes and the condition is checked by reading just before the
write (not atomic: such stores keep writers apart by the claim-and-settle rule of ``remote_publish``); a create
is still atomic where the store has conditional puts (``RemoteStore.conditional``).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from torch_drt.locations._store_errors import s3_error_code

if TYPE_CHECKING:
    from torch_drt.locations.remote_store import RemoteStore


_LOST = ("PreconditionFailed", "ConditionalRequestConflict")


def _by_etag(store: RemoteStore) -> bool:
    return store.scheme in ("s3", "s3a") and store.conditional


def _condition_failed(error: BaseException) -> bool:
    """Whether an S3 request failed because its ``If-Match``/``If-None-Match`` did not hold."""
    if isinstance(error, FileExistsError | FileNotFoundError):
        return True  # If-None-Match on an existing object; If-Match on a missing one
    return s3_error_code(error) in _LOST


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _s3_call(store: RemoteStore, method: str, rel: str, **kwargs: Any) -> Any:
    from fsspec.asyn import sync

    fs = store.fs
    bucket, key, _ = fs.split_path(store.path(rel))

    async def call() -> Any:
        response = await fs._call_s3(method, Bucket=bucket, Key=key, **kwargs)
        if method == "get_object":
            async with response["Body"] as body:
                return await body.read(), response["ETag"]
        return response

    result = sync(fs.loop, call)
    fs.invalidate_cache(store.path(rel))
    return result


def read_versioned(store: RemoteStore, rel: str) -> tuple[bytes, str] | None:
    """The object's bytes and version, read in one request on S3; None when it is missing."""

    def read() -> tuple[bytes, str] | None:
        try:
            if _by_etag(store):
                data, etag = _s3_call(store, "get_object", rel)
                return bytes(data), str(etag)
            data = bytes(store.fs.cat_file(store.path(rel)))
        except FileNotFoundError:
            return None
        return data, _digest(data)

    return store.run("reading", rel, read)


def put_if(store: RemoteStore, rel: str, data: bytes, version: str | None) -> str | None:
    """Write ``data`` to ``rel`` only while the object is at ``version`` (None: only while it is missing).

    Returns:
        The object's new version, or None when the condition did not hold (nothing was written).
    """

    def put() -> str | None:
        if _by_etag(store):
            match = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
            try:
                return str(_s3_call(store, "put_object", rel, Body=data, **match)["ETag"])
            except Exception as e:
                if _condition_failed(e):
                    return None
                raise
        path = store.path(rel)
        if version is None and store.conditional:
            try:
                store.fs.pipe_file(path, data, mode="create")
            except FileExistsError:
                return None
            return _digest(data)
        try:
            current: str | None = _digest(bytes(store.fs.cat_file(path)))
        except FileNotFoundError:
            current = None
        if current != version:
            return None
        store.fs.pipe_file(path, data)
        return _digest(data)

    return store.run("writing", rel, put)


def remove_if(store: RemoteStore, rel: str, version: str) -> bool:
    """Delete ``rel`` only while it is at ``version``; False when it was not (nothing was deleted)."""

    def remove() -> bool:
        if _by_etag(store):
            try:
                _s3_call(store, "delete_object", rel, IfMatch=version)
            except Exception as e:
                if _condition_failed(e):
                    return False
                raise
            return True
        found = read_versioned(store, rel)
        if found is None or found[1] != version:
            return False
        store.fs.rm_file(store.path(rel))
        return True

    return store.run("deleting", rel, remove)
