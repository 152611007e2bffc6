"""The bytes a ledger client stores on bookies for one entry: a header, the payload, a digest.

Layout (big-endian), 44 header bytes then the payload::

    u8   format version (ENTRY_FORMAT_VERSION)
    3x   reserved, zero
    i64  ledger id
    i64  entry id
    i64  writer's last-add-confirmed when it sent this entry
    i64  ledger length in bytes up to and including this entry (recovery closes with it)
    u32  payload length
    u32  CRC-32C over the 40 bytes above and the payload

Every read verifies the digest and that the header names the ledger and entry asked for; any
difference is a DigestMismatchError. Sans-IO: this module must never touch sockets or Trio.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from ledger_backend.client.errors import DigestMismatchError

ENTRY_FORMAT_VERSION = 1
_HEADER = struct.Struct(">B3xqqqqI")
_DIGEST = struct.Struct(">I")
ENTRY_OVERHEAD_BYTES = _HEADER.size + _DIGEST.size


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    ledger_id: int
    entry_id: int
    lac: int
    ledger_length: int
    payload: bytes


def encode_entry(
    ledger_id: int, entry_id: int, lac: int, ledger_length: int, payload: bytes | memoryview
) -> bytes:
    """The stored form of one entry (header, digest, payload: one copy of the payload)."""
    header = _HEADER.pack(ENTRY_FORMAT_VERSION, ledger_id, entry_id, lac, ledger_length,
                          len(payload))  # fmt: skip
    digest = crc32c.crc32c(payload, crc32c.crc32c(header))
    return b"".join((header, _DIGEST.pack(digest), payload))


def decode_entry(data: bytes | memoryview, *, ledger_id: int, entry_id: int) -> DecodedEntry:
    """Check and split a stored entry. DigestMismatchError on any inconsistency."""
    view = memoryview(data)
    if len(view) < ENTRY_OVERHEAD_BYTES:
        raise DigestMismatchError(
            f"ledger {ledger_id} entry {entry_id}: {len(view)} bytes is shorter than a header"
        )
    version, got_ledger, got_entry, lac, ledger_length, payload_length = _HEADER.unpack_from(view)
    (digest,) = _DIGEST.unpack_from(view, _HEADER.size)
    payload = view[ENTRY_OVERHEAD_BYTES:]
    if version != ENTRY_FORMAT_VERSION:
        raise DigestMismatchError(
            f"ledger {ledger_id} entry {entry_id}: unknown entry format version {version}"
        )
    if len(payload) != payload_length:
        raise DigestMismatchError(
            f"ledger {ledger_id} entry {entry_id}: payload is {len(payload)} bytes, header says "
            f"{payload_length}"
        )
    computed = crc32c.crc32c(payload, crc32c.crc32c(view[: _HEADER.size]))
    if computed != digest:
        raise DigestMismatchError(
            f"ledger {ledger_id} entry {entry_id}: CRC-32C {computed:#010x} != stored "
            f"{digest:#010x}"
        )
    if got_ledger != ledger_id or got_entry != entry_id:
        raise DigestMismatchError(
            f"asked for ledger {ledger_id} entry {entry_id}, got ledger {got_ledger} "
            f"entry {got_entry}"
        )
    return DecodedEntry(got_ledger, got_entry, lac, ledger_length, bytes(payload))
