"""The object-store offloader: S3 and S3-compatible stores (and GCS/Azure) through obstore.

Why obstore: it is the Python binding of the Rust `object_store` crate that Apache Arrow
DataFusion, Delta-rs and InfluxDB use; one small wheel with no Python dependencies speaks
S3 (any endpoint), GCS and Azure with the same four calls we need (put, ranged get, head,
delete), does multipart uploads itself and retries with backoff. fsspec/s3fs would pull in
aiobotocore and an asyncio loop of its own, which sits badly beside Trio. obstore's calls
are synchronous Rust calls that release the GIL, so they run in Trio worker threads.

A put is atomic (S3 PUT/complete-multipart semantics: an object is visible whole or not at
all). Uploads stream: an offload stages each object (`stage`, offload_uploads.Stages) as a
multipart upload fed piece by piece while its ledger is still being read (obstore's
open_writer: parts of _PART_BYTES, up to _PARTS_IN_FLIGHT uploading at a time, so memory
per object stays bounded whatever its size), and `commit_group` completes them; before
the completion nothing is under the key, and a discarded upload is aborted. A crash leaves
at worst an incomplete multipart upload, invisible to readers (a bucket lifecycle rule
"abort incomplete multipart uploads after N days" reclaims its space). A plain `put` of
parts streams them the same way, never joined into one copy. Errors map to
ObjectMissingError / ObjectStoreUnavailableError. This module must never log credentials
or put them into an error message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import obstore
import trio
from obstore.exceptions import BaseError, NotFoundError

from ledger_backend.offload.offloader import ObjectMissingError, ObjectStoreUnavailableError

# multipart part size (S3's smallest part is 5 MiB) and parts of one object uploading at once
_PART_BYTES = 5 << 20
_PARTS_IN_FLIGHT = 4


class ObjectStoreOffloader:
    def __init__(self, store: Any, driver: str, location: str,
                 fields: dict[str, str] | None = None,
                 credentials: dict[str, str | None] | None = None) -> None:
        self._store = store
        self._driver = driver
        self._location = location
        self._fields = dict(fields or {})
        self._credentials = dict(credentials or {})

    @classmethod
    def s3(
        cls,
        bucket: str,
        *,
        prefix: str = "",
        region: str = "us-east-1",
        endpoint: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
    ) -> ObjectStoreOffloader:
        from obstore.store import S3Store

        config: dict[str, Any] = {"region": region}
        if endpoint:
            config["endpoint"] = endpoint
            config["virtual_hosted_style_request"] = False
        if access_key_id:
            config["access_key_id"] = access_key_id
        if secret_access_key:
            config["secret_access_key"] = secret_access_key
        client: dict[str, Any] = {"allow_http": bool(endpoint and endpoint.startswith("http:"))}
        store = S3Store(
            bucket, prefix=prefix or None, config=config, client_options=client  # type: ignore[arg-type]
        )
        where = f"s3://{bucket}/{prefix}" + (f" at {endpoint}" if endpoint else "")
        fields = {"bucket": bucket, "prefix": prefix, "region": region,
                  "endpoint": endpoint or ""}
        return cls(store, "s3", where, fields, {"access_key_id": access_key_id,
                                                "secret_access_key": secret_access_key})

    @property
    def location_fields(self) -> dict[str, str]:
        return dict(self._fields)

    def at(self, fields: dict[str, str]) -> ObjectStoreOffloader:
        if self._driver != "s3":
            raise ValueError(f"no other location for driver {self._driver!r}")
        return ObjectStoreOffloader.s3(
            fields["bucket"], prefix=fields.get("prefix", ""),
            region=fields.get("region") or "us-east-1", endpoint=fields.get("endpoint") or None,
            **self._credentials)

    @property
    def driver(self) -> str:
        return self._driver

    @property
    def location(self) -> str:
        return self._location

    def _error(self, what: str, key: str, exc: Exception) -> Exception:
        if isinstance(exc, (NotFoundError, FileNotFoundError)):
            return ObjectMissingError(f"no object {key!r} in {self._location}")
        return ObjectStoreUnavailableError(
            f"{what} {key!r} in {self._location} failed: {type(exc).__name__}")

    async def _call(self, what: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await trio.to_thread.run_sync(lambda: fn(self._store, key, *args, **kwargs))
        except (BaseError, OSError) as exc:
            raise self._error(what, key, exc) from exc

    async def put(self, key: str, data: bytes | Sequence[bytes]) -> None:
        body: Any = data
        if not isinstance(data, (bytes, bytearray, memoryview)):
            body = iter(data)  # streamed as a multipart upload, not joined
        await self._call("put", key, obstore.put, body, chunk_size=_PART_BYTES,
                         max_concurrency=_PARTS_IN_FLIGHT)

    def stage(self, key: str) -> StagedUpload:
        """An object to be written in pieces (StagedUpload.write, from a worker thread: each
        full part starts uploading at once) and stored by `commit_group`; nothing is under
        its key before that."""
        return StagedUpload(self, key)

    async def commit_group(self, staged: Sequence[StagedUpload]) -> None:
        """Complete the staged uploads (at the same time). On an error the ones not
        completed are aborted; some may be stored whole (the caller deletes them). Store
        errors alone are raised as the first ObjectStoreUnavailableError; anything else
        among them (a cancellation, a bug) is raised without the store errors, so a
        Cancelled always reaches its scope."""
        try:
            async with trio.open_nursery() as nursery:
                for one in staged:
                    nursery.start_soon(trio.to_thread.run_sync, one.commit)
        except BaseExceptionGroup as group:
            await self._discard_all(staged)
            unavailable, rest = group.split(ObjectStoreUnavailableError)
            if rest is not None:
                raise rest from None  # split keeps each exception's own traceback
            assert unavailable is not None
            raise _first(unavailable) from None
        except BaseException:
            await self._discard_all(staged)
            raise

    async def _discard_all(self, staged: Sequence[StagedUpload]) -> None:
        with trio.CancelScope(shield=True):
            for one in staged:
                await trio.to_thread.run_sync(one.discard)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        got = await self._call("get", key, obstore.get_range, start=start, length=length)
        return bytes(got)

    async def size(self, key: str) -> int:
        meta = await self._call("head", key, obstore.head)
        return int(meta["size"])

    async def delete(self, key: str) -> None:
        try:
            await self._call("delete", key, obstore.delete)
        except ObjectMissingError:
            pass


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


class StagedUpload:
    """One object's multipart upload, fed piece by piece (obstore.open_writer), completed by
    `commit` or aborted by `discard`. Its methods block: call them from worker threads."""

    def __init__(self, owner: ObjectStoreOffloader, key: str) -> None:
        self.key = key
        self._owner = owner
        self._writer: Any = None
        self._done = False  # committed or discarded

    def _open(self) -> Any:
        if self._done:
            raise ObjectStoreUnavailableError(f"write to a finished upload of {self.key!r}")
        if self._writer is None:
            self._writer = obstore.open_writer(self._owner._store, self.key,
                                               buffer_size=_PART_BYTES,
                                               max_concurrency=_PARTS_IN_FLIGHT)  # fmt: skip
        return self._writer

    def write(self, parts: Sequence[bytes]) -> None:
        try:
            writer = self._open()
            for part in parts:
                writer.write(part)
        except (BaseError, OSError) as exc:
            raise self._owner._error("upload", self.key, exc) from exc

    def commit(self) -> None:
        """Complete the upload: the object appears under its key, whole."""
        try:
            self._open().close()
        except (BaseError, OSError) as exc:
            raise self._owner._error("upload", self.key, exc) from exc
        self._done = True

    def discard(self) -> None:
        """Abort the upload (nothing appears under the key); no error if it is finished."""
        if self._done:
            return
        self._done = True
        writer, self._writer = self._writer, None
        if writer is not None:
            try:  # leaving the writer on an error aborts its multipart upload
                writer.__exit__(ObjectStoreUnavailableError, ObjectStoreUnavailableError(), None)
            except Exception:  # noqa: BLE001 - an upload not aborted is invisible anyway
                pass
