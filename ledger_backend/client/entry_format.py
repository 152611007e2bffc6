"""The bytes a ledger client stores on bookies for one entry: a header, the payload, a digest.

Layout (big-endian), 44 header bytes then the payload::

    u8   format version (ENTRY_FORMAT_VERSION)
    3x   reserved, zero
    i64  ledger id
    i64  entry id
    i64  writer's last-add-confirmed when it sent this entry
    i64  ledger length in bytes up to and including this entry (recovery closes with it)
    u32  payload length
    u32  CRC-32C over the 40 bytes above and the payload        (format version 1)
    32B  HMAC-SHA256 over the 40 bytes above and the payload    (format version 2)

Version 2 is BookKeeper's MAC digest type: a ledger whose metadata says HMAC_SHA256 carries
a MAC keyed by the ledger's MAC key (bookie/master_key.py `derive_mac_key`: from the ledger
password, and unlike the master key never sent to a bookie), so neither a bookie nor anyone
who reaches its disk can forge or alter an entry that a reader accepts. Readers hold such a
ledger to version 2 (no downgrade to a CRC), and a version-2 entry cannot be read without
the key.

Every read verifies the digest and that the header names the ledger and entry asked for; any
difference is a DigestMismatchError. Sans-IO: this module must never touch sockets or Trio,
and must never compare a MAC with ``==``.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass

import crc32c

from ledger_backend.client.errors import DigestMismatchError

ENTRY_FORMAT_VERSION = 1
ENTRY_FORMAT_VERSION_MAC = 2
_HEADER = struct.Struct(">B3xqqqqI")
_DIGEST = struct.Struct(">I")
_MAC_BYTES = hashlib.sha256().digest_size
ENTRY_OVERHEAD_BYTES = _HEADER.size + _DIGEST.size
ENTRY_OVERHEAD_BYTES_MAC = _HEADER.size + _MAC_BYTES


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    ledger_id: int
    entry_id: int
    lac: int
    ledger_length: int
    payload: bytes


def _mac(key: bytes, header: bytes | memoryview, payload: bytes | memoryview) -> bytes:
    mac = hmac.new(key, header, hashlib.sha256)
    mac.update(payload)
    return mac.digest()


def encode_entry(
    ledger_id: int, entry_id: int, lac: int, ledger_length: int, payload: bytes | memoryview,
    *, mac_key: bytes | None = None,
) -> bytes:
    """The stored form of one entry (header, digest, payload: one copy of the payload); with
    mac_key, format version 2 and an HMAC-SHA256 instead of the CRC."""
    version = ENTRY_FORMAT_VERSION if mac_key is None else ENTRY_FORMAT_VERSION_MAC
    header = _HEADER.pack(version, ledger_id, entry_id, lac, ledger_length, len(payload))
    if mac_key is not None:
        return b"".join((header, _mac(mac_key, header, payload), payload))
    digest = crc32c.crc32c(payload, crc32c.crc32c(header))
    return b"".join((header, _DIGEST.pack(digest), payload))


def decode_entry(data: bytes | memoryview, *, ledger_id: int, entry_id: int,
                 mac_key: bytes | None = None) -> DecodedEntry:  # fmt: skip
    """Check and split a stored entry. DigestMismatchError on any inconsistency. mac_key (the
    ledger's, when its metadata says HMAC_SHA256) requires a version-2 entry with its MAC."""
    view = memoryview(data)
    if len(view) < ENTRY_OVERHEAD_BYTES:
        raise DigestMismatchError(
            f"ledger {ledger_id} entry {entry_id}: {len(view)} bytes is shorter than a header"
        )
    version = view[0]
    expected = ENTRY_FORMAT_VERSION if mac_key is None else ENTRY_FORMAT_VERSION_MAC
    if version != expected:
        if version == ENTRY_FORMAT_VERSION_MAC:
            why = "carries a MAC and this reader has no ledger password to check it"
        elif version == ENTRY_FORMAT_VERSION:
            why = "carries a CRC where the ledger's metadata requires a MAC"
        else:
            why = f"has an unknown entry format version {version}"
        raise DigestMismatchError(f"ledger {ledger_id} entry {entry_id} {why}")
    overhead = ENTRY_OVERHEAD_BYTES if mac_key is None else ENTRY_OVERHEAD_BYTES_MAC
    if len(view) < overhead:
        raise DigestMismatchError(
            f"ledger {ledger_id} entry {entry_id}: {len(view)} bytes is shorter than a header"
        )
    _, got_ledger, got_entry, lac, ledger_length, payload_length = _HEADER.unpack_from(view)
    payload = view[overhead:]
    if len(payload) != payload_length:
        raise DigestMismatchError(
            f"ledger {ledger_id} entry {entry_id}: payload is {len(payload)} bytes, header says "
            f"{payload_length}"
        )
    if mac_key is not None:
        if not hmac.compare_digest(_mac(mac_key, view[: _HEADER.size], payload),
                                   view[_HEADER.size:overhead]):
            raise DigestMismatchError(f"ledger {ledger_id} entry {entry_id}: MAC mismatch "
                                      "(altered, forged, or another ledger password)")
    else:
        (digest,) = _DIGEST.unpack_from(view, _HEADER.size)
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
