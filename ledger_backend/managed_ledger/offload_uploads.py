"""What an offload (offloading.py) asks of the object store's drivers, and how an upload is
checked: the optional driver capabilities (a driver that reads an object back itself, stages
objects while their ledger is read, or stores a group at once), the verification of a stored
object against what was encoded, and running calls at the same time with the first error
raised plainly. This module must never write metadata; it touches the store only to verify.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import crc32c
import trio

from ledger_backend.offload.object_format import EncodedObject, ObjectFormatError
from ledger_backend.offload.offloader import Offloader

# an upload is read back and checked in ranges of this size
_VERIFY_CHUNK = 4 << 20


@runtime_checkable
class ReadsBack(Protocol):
    """A driver that reads a stored object back whole itself: (size, CRC-32C)."""

    async def read_back(self, key: str) -> tuple[int, int]: ...


class Staged(Protocol):
    """An object written in pieces before it is stored (filesystem.StagedObject)."""

    key: str

    def write(self, parts: Sequence[bytes]) -> None: ...

    def discard(self) -> None: ...


@runtime_checkable
class Stages(Protocol):
    """A driver whose objects can be written while their ledger is read and stored later as a
    group (the filesystem's: the disk writes overlap the reads); each still whole or absent."""

    def stage(self, key: str) -> Any: ...

    async def commit_group(self, staged: Sequence[Any]) -> None: ...


@runtime_checkable
class PutsGroups(Protocol):
    """A driver that stores a group of objects at once (the filesystem's writes, then fsyncs:
    the disk writes overlap); each object still whole or absent."""

    async def put_group(self, objects: Sequence[tuple[str, bytes | Sequence[bytes]]]
                        ) -> None: ...  # fmt: skip


def _discard_all(staged: list[Staged]) -> None:
    for one in staged:
        one.discard()  # a no-op for a committed object


async def _first_error_of(calls: list[Callable[[], Awaitable[None]]]) -> None:
    """Run the calls at the same time; the first error cancels the others and is raised
    plainly (not inside an ExceptionGroup)."""
    error: Exception | None = None
    async with trio.open_nursery() as nursery:
        for call in calls:
            async def run(call: Callable[[], Awaitable[None]] = call) -> None:
                nonlocal error
                try:
                    await call()
                except Exception as exc:  # noqa: BLE001 - the first is raised below
                    if error is None:
                        error = exc
                    nursery.cancel_scope.cancel()
            nursery.start_soon(run)
    if error is not None:
        raise error


async def _verify(offloader: Offloader, key: str, data: EncodedObject) -> None:
    """The stored object must be what was encoded from the bookies' entries: read back whole
    (in _VERIFY_CHUNK ranges), its size and CRC-32C must be the encoded object's (so its block
    CRCs and index are the ones encode_object_parts computed). A driver that reads its
    objects back itself (`ReadsBack`: the filesystem's one pass through one buffer) does."""
    if isinstance(offloader, ReadsBack):
        size, crc = await offloader.read_back(key)
        if size != data.size or crc != data.crc:
            raise ObjectFormatError(f"object {key!r} read back differs from what was written")
        return
    size = await offloader.size(key)
    crc = 0
    for start in range(0, size, _VERIFY_CHUNK):
        back = await offloader.get_range(key, start, min(_VERIFY_CHUNK, size - start))
        if len(back) != min(_VERIFY_CHUNK, size - start):
            break
        crc = crc32c.crc32c(back, crc)
    if size != data.size or crc & 0xFFFFFFFF != data.crc:
        raise ObjectFormatError(f"object {key!r} read back differs from what was written")
