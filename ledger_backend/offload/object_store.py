"""The object-store offloader: S3 and S3-compatible stores (and GCS/Azure) through obstore.

Why obstore: it is the Python binding of the Rust `object_store` crate that Apache Arrow
DataFusion, Delta-rs and InfluxDB use; one small wheel with no Python dependencies speaks
S3 (any endpoint), GCS and Azure with the same four calls we need (put, ranged get, head,
delete), does multipart uploads itself and retries with backoff. fsspec/s3fs would pull in
aiobotocore and an asyncio loop of its own, which sits badly beside Trio. obstore's calls
are synchronous Rust calls that release the GIL, so they run in Trio worker threads.

A put is atomic (S3 PUT/complete-multipart semantics: an object is visible whole or not at
all). Errors map to ObjectMissingError / ObjectStoreUnavailableError. This module must never
log credentials or put them into an error message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import obstore
import trio
from obstore.exceptions import BaseError, NotFoundError

from ledger_backend.offload.offloader import ObjectMissingError, ObjectStoreUnavailableError


class ObjectStoreOffloader:
    def __init__(self, store: Any, driver: str, location: str) -> None:
        self._store = store
        self._driver = driver
        self._location = location

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
        return cls(store, "s3", where)

    @property
    def driver(self) -> str:
        return self._driver

    @property
    def location(self) -> str:
        return self._location

    async def _call(self, what: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await trio.to_thread.run_sync(lambda: fn(self._store, key, *args, **kwargs))
        except (NotFoundError, FileNotFoundError) as exc:
            raise ObjectMissingError(f"no object {key!r} in {self._location}") from exc
        except (BaseError, OSError) as exc:
            raise ObjectStoreUnavailableError(
                f"{what} {key!r} in {self._location} failed: {type(exc).__name__}"
            ) from exc

    async def put(self, key: str, data: bytes | Sequence[bytes]) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            data = b"".join(data)
        await self._call("put", key, obstore.put, data)

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
