"""The Offloader interface (where offloaded ledger objects are kept) and its errors.

An offloader stores opaque objects under keys. Its one durability promise: after `put`
returns, `get_range` of that key returns exactly the bytes put; before that, a reader sees
either no object or (never) a partial one -- uploads are atomic. Drivers: filesystem.py (a
directory) and object_store.py (S3/GCS/Azure through obstore). This module holds the
interface and the errors only: it must never do I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class OffloadError(Exception):
    """Root of the offload errors."""


class ObjectMissingError(OffloadError):
    """No object under that key (deleted, or never completely written)."""


class ObjectStoreUnavailableError(OffloadError):
    """The object store could not be reached or refused the request (try again later)."""


class OffloadedReadError(OffloadError):
    """An offloaded ledger could not be read (missing, unreachable or corrupt object); the
    message names the object. Readers get this, never a byte that was not verified."""


class OffloadedObjectDamagedError(OffloadedReadError):
    """The object is gone or does not verify (a checksum, magic, version or size mismatch):
    unlike an unreachable store, retrying will not help until someone restores it."""


class Offloader(Protocol):
    """One place offloaded objects live (see the module docstring for the promise)."""

    @property
    def driver(self) -> str:
        """The driver name recorded in ledger metadata ("filesystem", "s3", ...)."""
        ...

    @property
    def location(self) -> str:
        """A human-readable location (directory, bucket/prefix) for logs and status."""
        ...

    @property
    def location_fields(self) -> dict[str, str]:
        """Where the store is, as ledger metadata records it (never a credential)."""
        ...

    def at(self, fields: dict[str, str]) -> Offloader:
        """The same driver (and credentials) at another recorded location."""
        ...

    async def put(self, key: str, data: bytes | Sequence[bytes]) -> None:
        """Store `data` (bytes, or the parts whose concatenation is the object) under `key`
        atomically and durably."""
        ...

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes of `key` from `start` (fewer only at the end of the object)."""
        ...

    async def size(self, key: str) -> int:
        """The object's size in bytes; ObjectMissingError if there is none."""
        ...

    async def delete(self, key: str) -> None:
        """Delete the object (no error if it is already gone)."""
        ...


def at_recorded(offloader: Offloader, location: tuple[tuple[str, str], ...]) -> Offloader:
    """The offloader to reach an object recorded at `location` (OffloadRecord.location) with
    the configured `offloader` of its driver: that one when the location is its own or was
    not recorded, else the same driver at the recorded place (OffloadError if unusable)."""
    if not location or dict(location) == offloader.location_fields:
        return offloader
    try:
        return offloader.at(dict(location))
    except (KeyError, ValueError) as exc:
        raise OffloadError(f"recorded location {dict(location)} is not usable: {exc!r}") from exc
