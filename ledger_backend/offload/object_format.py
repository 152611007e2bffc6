"""The offloaded-ledger object format (version 1): one self-describing object per ledger.

Layout (all integers big-endian):

    header   "LWOFFLD\\0" (8) | version u16 | flags u16 (0) | ledger_id u64 | header crc32c u32
    block*   "LWBK" | first_entry u64 | count u32 | payload_len u32 | payload crc32c u32 |
             payload = count x (entry_len u32 | entry bytes)
    index    "LWIX" | blocks u32 | blocks x (first_entry u64 | count u32 | offset u64 |
             length u32) | index crc32c u32           (offset/length cover the whole block)
    footer   index_offset u64 | index_length u32 | entries u64 | data_bytes u64 |
             footer crc32c u32 | "LWOFEND\\0" (8)      -- FOOTER_SIZE bytes, at the very end

A reader fetches the footer (last FOOTER_SIZE bytes), then the index, then only the blocks
that hold the entries it wants: a range read never downloads the whole ledger. Every part
carries a CRC-32C; a reader that finds a bad magic, version or checksum raises
ObjectFormatError naming what is wrong and never returns a byte it could not verify.
A reader refuses a version it does not know. This module is pure: it must never do I/O.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import crc32c

MAGIC = b"LWOFFLD\x00"
END_MAGIC = b"LWOFEND\x00"
VERSION = 1
BLOCK_MAGIC = b"LWBK"
INDEX_MAGIC = b"LWIX"

_HEADER = struct.Struct(">8sHHQ")  # + crc u32
HEADER_SIZE = _HEADER.size + 4
_BLOCK_HEAD = struct.Struct(">4sQIII")
_INDEX_HEAD = struct.Struct(">4sI")
_INDEX_ITEM = struct.Struct(">QIQI")
_FOOTER = struct.Struct(">QIQQ")  # + crc u32 + END_MAGIC
FOOTER_SIZE = _FOOTER.size + 4 + len(END_MAGIC)
_LEN = struct.Struct(">I")

DEFAULT_BLOCK_BYTES = 1 << 20


class ObjectFormatError(Exception):
    """An offloaded object (or a part of it) is not a valid version-1 object."""


@dataclass(frozen=True)
class BlockRef:
    first_entry: int
    count: int
    offset: int
    length: int

    @property
    def last_entry(self) -> int:
        return self.first_entry + self.count - 1


@dataclass(frozen=True)
class ObjectIndex:
    ledger_id: int
    entries: int
    data_bytes: int
    blocks: tuple[BlockRef, ...]

    def blocks_for(self, first: int, last: int) -> list[BlockRef]:
        """The blocks holding entries first..last (ValueError if outside the ledger)."""
        if first < 0 or last >= self.entries or first > last:
            raise ValueError(f"entries {first}..{last} are not in 0..{self.entries - 1}")
        starts = [b.first_entry for b in self.blocks]
        lo = bisect.bisect_right(starts, first) - 1
        hi = bisect.bisect_right(starts, last) - 1
        return list(self.blocks[lo : hi + 1])


def _crc(data: bytes | bytearray | memoryview) -> int:
    return crc32c.crc32c(data) & 0xFFFFFFFF


@dataclass(frozen=True)
class EncodedObject:
    """An encoded object as the parts whose concatenation it is: the entries themselves (not
    copies) between small headers, so writing it needs no second copy of the ledger."""

    parts: tuple[bytes, ...]
    size: int
    crc: int  # CRC-32C of the whole object

    def joined(self) -> bytes:
        return b"".join(self.parts)


class ObjectEncoder:
    """An object encoded as its entries come (0, 1, ... in order): `add` returns the parts of
    the blocks it completed (the header first), `finish` the rest (the last block, the index
    and the footer); `size` and `crc` then describe the whole object. The parts are the entries
    themselves (not copies) between small headers."""

    def __init__(self, ledger_id: int, block_bytes: int = DEFAULT_BLOCK_BYTES) -> None:
        head = _HEADER.pack(MAGIC, VERSION, 0, ledger_id)
        self._out: list[bytes] = [head, struct.pack(">I", _crc(head))]
        self._block_bytes = block_bytes
        self._refs: list[BlockRef] = []
        self._block: list[bytes] = []
        self._block_len = self._block_crc = self._first = self._count = 0
        self._entries = self._data_bytes = self._whole = 0
        self.size = HEADER_SIZE  # of the parts handed out and the block being built

    @property
    def crc(self) -> int:
        """CRC-32C of every part handed out (of the whole object once finished)."""
        return self._whole & 0xFFFFFFFF

    def add(self, entries: Iterable[bytes]) -> list[bytes]:
        block, crc, length, count = self._block, self._block_crc, self._block_len, self._count
        for data in entries:
            prefix = _LEN.pack(len(data))
            crc = crc32c.crc32c(data, crc32c.crc32c(prefix, crc))
            block.append(prefix)
            block.append(data)
            length += 4 + len(data)
            count += 1
            self._data_bytes += len(data)
            if length >= self._block_bytes:
                self._block_crc, self._block_len, self._count = crc, length, count
                self._flush()
                block, crc, length, count = self._block, 0, 0, 0
        self._block_crc, self._block_len, self._count = crc, length, count
        return self._take()

    def _flush(self) -> None:
        if self._count == 0:
            return
        self._out.append(_BLOCK_HEAD.pack(BLOCK_MAGIC, self._first, self._count,
                                          self._block_len, self._block_crc))  # fmt: skip
        self._out.extend(self._block)
        length = _BLOCK_HEAD.size + self._block_len
        self._refs.append(BlockRef(self._first, self._count, self.size, length))
        self.size += length
        self._entries += self._count
        self._first += self._count
        self._block, self._block_len, self._block_crc, self._count = [], 0, 0, 0

    def _take(self) -> list[bytes]:
        out, self._out = self._out, []
        for part in out:
            self._whole = crc32c.crc32c(part, self._whole)
        return out

    def finish(self) -> list[bytes]:
        self._flush()
        index_offset = self.size
        index = bytearray(_INDEX_HEAD.pack(INDEX_MAGIC, len(self._refs)))
        for ref in self._refs:
            index.extend(_INDEX_ITEM.pack(ref.first_entry, ref.count, ref.offset, ref.length))
        index.extend(struct.pack(">I", _crc(index)))
        footer = _FOOTER.pack(index_offset, len(index), self._entries, self._data_bytes)
        self._out.append(bytes(index))
        self._out.append(footer + struct.pack(">I", _crc(footer)) + END_MAGIC)
        self.size = index_offset + len(index) + FOOTER_SIZE
        return self._take()


def encode_object_parts(
    ledger_id: int, entries: Iterable[bytes], block_bytes: int = DEFAULT_BLOCK_BYTES
) -> EncodedObject:
    """The object for a ledger whose entries (0, 1, ...) are `entries`, as parts."""
    encoder = ObjectEncoder(ledger_id, block_bytes)
    parts = encoder.add(entries) + encoder.finish()
    return EncodedObject(tuple(parts), encoder.size, encoder.crc)


def encode_object(
    ledger_id: int, entries: Iterable[bytes], block_bytes: int = DEFAULT_BLOCK_BYTES
) -> bytes:
    """The whole object for a ledger whose entries (0, 1, ...) are `entries`, in one piece."""
    return encode_object_parts(ledger_id, entries, block_bytes).joined()


def decode_header(data: bytes) -> int:
    """The ledger id of an object's first HEADER_SIZE bytes."""
    if len(data) < HEADER_SIZE:
        raise ObjectFormatError("header is truncated")
    magic, version, _flags, ledger_id = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ObjectFormatError(f"bad magic {magic!r}: not an offloaded ledger")
    if version != VERSION:
        raise ObjectFormatError(f"format version {version} is not supported (reads {VERSION})")
    (crc,) = struct.unpack_from(">I", data, _HEADER.size)
    if crc != _crc(data[: _HEADER.size]):
        raise ObjectFormatError("header checksum mismatch")
    return int(ledger_id)


def decode_footer(data: bytes) -> tuple[int, int, int, int]:
    """(index_offset, index_length, entries, data_bytes) from the last FOOTER_SIZE bytes."""
    if len(data) != FOOTER_SIZE or data[-len(END_MAGIC) :] != END_MAGIC:
        raise ObjectFormatError("footer missing or truncated (bad end magic)")
    (crc,) = struct.unpack_from(">I", data, _FOOTER.size)
    if crc != _crc(data[: _FOOTER.size]):
        raise ObjectFormatError("footer checksum mismatch")
    index_offset, index_length, entries, data_bytes = _FOOTER.unpack_from(data)
    return int(index_offset), int(index_length), int(entries), int(data_bytes)


def decode_index(
    data: bytes, ledger_id: int, entries: int, data_bytes: int, index_offset: int
) -> ObjectIndex:
    """The block index (checked: CRC, blocks contiguous from entry 0, inside the object)."""
    if len(data) < _INDEX_HEAD.size + 4:
        raise ObjectFormatError("index is truncated")
    (crc,) = struct.unpack_from(">I", data, len(data) - 4)
    if crc != _crc(data[:-4]):
        raise ObjectFormatError("index checksum mismatch")
    magic, blocks = _INDEX_HEAD.unpack_from(data)
    if magic != INDEX_MAGIC or len(data) != _INDEX_HEAD.size + blocks * _INDEX_ITEM.size + 4:
        raise ObjectFormatError("index has a bad magic or length")
    refs: list[BlockRef] = []
    expect = 0
    for i in range(blocks):
        first, count, offset, length = _INDEX_ITEM.unpack_from(
            data, _INDEX_HEAD.size + i * _INDEX_ITEM.size
        )
        if first != expect or count < 1 or offset + length > index_offset:
            raise ObjectFormatError(f"index block {i} is inconsistent")
        refs.append(BlockRef(first, count, offset, length))
        expect = first + count
    if expect != entries:
        raise ObjectFormatError(f"index covers {expect} entries, footer says {entries}")
    return ObjectIndex(ledger_id, entries, data_bytes, tuple(refs))


def decode_block(data: bytes | memoryview, ref: BlockRef) -> list[bytes]:
    """The entries of one block (its full bytes as the index locates them), CRC-checked; the
    entries are copies, so `data` may be a view of a larger read."""
    if len(data) != ref.length or len(data) < _BLOCK_HEAD.size:
        raise ObjectFormatError(f"block at {ref.offset} is truncated")
    magic, first, count, payload_len, crc = _BLOCK_HEAD.unpack_from(data)
    if magic != BLOCK_MAGIC or first != ref.first_entry or count != ref.count:
        raise ObjectFormatError(f"block at {ref.offset} does not match the index")
    view = memoryview(data)[_BLOCK_HEAD.size :]
    if len(view) != payload_len or _crc(view) != crc:
        raise ObjectFormatError(f"block at {ref.offset} checksum mismatch")
    out: list[bytes] = []
    pos = 0
    for _ in range(count):
        if pos + 4 > payload_len:
            raise ObjectFormatError(f"block at {ref.offset} entry lengths overrun")
        (size,) = _LEN.unpack_from(view, pos)
        pos += 4
        if pos + size > payload_len:
            raise ObjectFormatError(f"block at {ref.offset} entry lengths overrun")
        out.append(bytes(view[pos : pos + size]))
        pos += size
    if pos != payload_len:
        raise ObjectFormatError(f"block at {ref.offset} has trailing bytes")
    return out


def decode_whole(data: bytes) -> tuple[ObjectIndex, list[bytes]]:
    """Check a whole object and return its index and entries (used to verify an upload)."""
    ledger_id = decode_header(data[:HEADER_SIZE])
    if len(data) < HEADER_SIZE + FOOTER_SIZE:
        raise ObjectFormatError("object is truncated")
    index_offset, index_length, entries, data_bytes = decode_footer(data[-FOOTER_SIZE:])
    if index_offset + index_length + FOOTER_SIZE != len(data):
        raise ObjectFormatError("footer does not locate the index at the end")
    index = decode_index(
        data[index_offset : index_offset + index_length],
        ledger_id, entries, data_bytes, index_offset,
    )
    out: list[bytes] = []
    for ref in index.blocks:
        out.extend(decode_block(data[ref.offset : ref.offset + ref.length], ref))
    return index, out
