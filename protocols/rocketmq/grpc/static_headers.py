"""HPACK for the server's own few header lists: encoded once each, never into the dynamic table.

A gRPC server sends the same handful of header lists over and over (`:status 200` with
`content-type application/grpc`, `grpc-status 0` trailers, a few error trailers).  hpack's
Encoder searches and grows its dynamic table for each of them; this encoder writes every field
as a static-table index or a literal *without indexing* (RFC 7541 6.1, 6.2.2), so its output
depends on the header list alone and is kept in a small cache.  A peer's change of
SETTINGS_HEADER_TABLE_SIZE is acknowledged with a dynamic table size update at the start of
the next block (RFC 7541 4.2), as the protocol asks even of an encoder that never uses the
table.  It is what h2 calls as its `encoder`: `encode(headers)` and `header_table_size`.

This module never does I/O and never encodes a header list it has not been given.
"""

from __future__ import annotations

from collections.abc import Iterable

from hpack.table import HeaderTable

MAX_CACHED = 256  # distinct header lists kept (error trailers carry messages; they may vary)
_STATIC_FULL: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAME: dict[bytes, int] = {}
for _index, (_name, _value) in enumerate(HeaderTable.STATIC_TABLE, start=1):
    _STATIC_FULL.setdefault((_name, _value), _index)
    _STATIC_NAME.setdefault(_name, _index)


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    """RFC 7541 5.1: `value` with an N-bit prefix; `first` holds the pattern bits above it."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(data: bytes) -> bytes:
    return _integer(len(data), 7, 0x00) + data  # H = 0: raw octets


def _field(name: bytes, value: bytes) -> bytes:
    index = _STATIC_FULL.get((name, value))
    if index is not None:
        return _integer(index, 7, 0x80)
    index = _STATIC_NAME.get(name)
    if index is not None:
        return _integer(index, 4, 0x00) + _string(value)
    return b"\x00" + _string(name) + _string(value)


def _as_bytes(item: str | bytes) -> bytes:
    return item.encode("utf-8") if isinstance(item, str) else bytes(item)


class StaticHeaderEncoder:
    def __init__(self) -> None:
        self._table_size = 4096
        self._pending_update: int | None = None
        self._cache: dict[tuple[tuple[bytes, bytes], ...], bytes] = {}

    @property
    def header_table_size(self) -> int:
        return self._table_size

    @header_table_size.setter
    def header_table_size(self, value: int) -> None:
        self._table_size = value
        self._pending_update = value

    def encode(self, headers: Iterable[tuple[str | bytes, str | bytes]],
               huffman: bool = True) -> bytes:
        key = tuple((_as_bytes(n), _as_bytes(v)) for n, v in headers)
        block = self._cache.get(key)
        if block is None:
            block = b"".join(_field(n, v) for n, v in key)
            if len(self._cache) < MAX_CACHED:
                self._cache[key] = block
        if self._pending_update is not None:
            # Our table stays empty at any size: the update only tells the peer we saw it.
            block = _integer(self._pending_update, 5, 0x20) + block
            self._pending_update = None
        return block
