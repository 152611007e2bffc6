"""Kafka log compaction as a pure function of record batches: which records survive.

Kafka's rules (LogCleaner), applied to the batches of a partition's cleanable range, which
the caller feeds twice in offset order:

1. `CompactionPlan.observe(batch)` builds the map key -> offset of its latest record (a
   batch compacted by an earlier pass is observed `clean`: only its header counts). Records
   of a transaction count only once its COMMIT marker is seen; an ABORT marker marks the
   transaction's batches aborted; a transaction whose marker is not in the range is
   undecided (its records neither count nor get removed).
2. `CompactionPlan.filter(batch, expired=...)` returns the batch to keep (the same bytes when
   nothing changed), a rewritten batch, or None. A record survives when it is its key's latest
   record; a tombstone (null value) survives that too, until `expired` (the caller's
   delete.retention.ms decision for the batch's ledger); records without a key and records of
   aborted transactions never survive. A rewritten batch keeps its base offset, last offset
   delta, producer id/epoch, base sequence, attributes and codec; only its record count, max
   timestamp (CreateTime) and CRC change, and surviving records keep their own bytes, so
   their offsets and timestamps are unchanged. A batch that loses every record is dropped,
   except the last batch of a producer id, which stays as an empty batch (as in Kafka) so
   that producer state rebuilt from the log keeps its epoch and sequence. A transaction
   marker goes once it is `expired` and no record of its transaction survives (and it is not
   its producer's last batch).

This module is sans-IO and never decides WHEN to compact or which ledgers: the caller does
(gateway). It must never change a surviving record's offset or bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from protocols.kafka import compression as codecs
from protocols.kafka.errors import CorruptMessageError
from protocols.kafka.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_LOG_APPEND_TIME,
    CONTROL_ABORT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
    parse_header,
)
from protocols.kafka.record_batch import read_varint as _varint  # one varint reader

_CRC = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")


class RawRecord(NamedTuple):
    """One record of a decompressed batch payload, located but not copied."""

    start: int
    end: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    is_tombstone: bool


_new_record = tuple.__new__  # RawRecord(...) without the NamedTuple __new__ call overhead


def iter_raw_records(payload: bytes, count: int) -> Iterator[RawRecord]:
    """The records of a decompressed payload: offsets, timestamps, key, tombstone flag."""
    try:
        yield from _scan(payload, count)
    except IndexError as exc:
        raise CorruptMessageError("record runs past the batch") from exc


def _scan(payload: bytes, count: int) -> Iterator[RawRecord]:
    # The compactor's hot loop: varints of one or two bytes (nearly all lengths and deltas)
    # are decoded inline, longer ones by record_batch's reader.
    pos = 0
    size = len(payload)
    fields = [0, 0, 0, 0]
    for _ in range(count):
        p = pos
        for i in range(4):  # record length, (attributes), timestamp delta, offset delta, key len
            b = payload[p]
            if b < 0x80:
                fields[i] = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                c = payload[p + 1]
                if c < 0x80:
                    raw = (b & 0x7F) | (c << 7)
                    fields[i] = (raw >> 1) ^ -(raw & 1)
                    p += 2
                else:
                    fields[i], p = _varint(payload, p)
            if i == 0:
                length = fields[0]
                if length < 1 or p + length > size:
                    raise CorruptMessageError("record runs past the batch")
                end = p + length
                p += 1  # record attributes
        _, ts_delta, offset_delta, key_len = fields
        key: bytes | None = None
        if key_len >= 0:
            if p + key_len > end:
                raise CorruptMessageError("record key runs past the record")
            key = payload[p : p + key_len]
            p += key_len
        if p >= end:
            raise CorruptMessageError("record ends before its value")
        b = payload[p]
        tombstone = b == 1 if b < 0x80 else _varint(payload, p)[0] < 0
        yield _new_record(RawRecord, (pos, end, ts_delta, offset_delta, key, tombstone))
        pos = end
    if pos != size:
        raise CorruptMessageError("batch payload has bytes after its last record")


def _payload(header: BatchHeader, batch: bytes) -> bytes:
    body = memoryview(batch)[HEADER_SIZE : header.size]
    try:
        return codecs.decompress(header.compression, body)
    except codecs.CompressionError as exc:
        raise CorruptMessageError(str(exc)) from exc


def _control_type(header: BatchHeader, batch: bytes) -> int:
    payload = _payload(header, batch)
    for record in iter_raw_records(payload, header.records_count):
        if record.key is not None and len(record.key) >= 4:
            return int(_CONTROL_KEY.unpack_from(record.key)[1])
    raise CorruptMessageError("control batch without a control record")


@dataclass
class CompactionStats:
    batches_in: int = 0
    batches_out: int = 0
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    tombstones_removed: int = 0
    aborted_removed: int = 0
    keyless_removed: int = 0
    markers_removed: int = 0
    keys_out: int = 0  # surviving keyed records: below the point, one per key


@dataclass
class CompactionPlan:
    """Feed every batch of the range to `observe` (offset order), then to `filter`."""

    latest: dict[bytes, int] = field(default_factory=dict)
    stats: CompactionStats = field(default_factory=CompactionStats)
    _open_txn: dict[int, list[tuple[int, list[tuple[bytes, int]]]]] = field(
        default_factory=dict)
    _aborted: set[int] = field(default_factory=set)  # base offsets of aborted batches
    _undecided: set[int] = field(default_factory=set)
    _last_batch_of: dict[int, int] = field(default_factory=dict)  # producer -> base offset
    _txn_survivors: dict[int, bool] = field(default_factory=dict)
    _observed_end: bool = False

    # --- pass 1 -----------------------------------------------------------------------------

    def observe(self, batch: bytes, *, clean: bool = False) -> None:
        """`clean`: the batch lies below the last pass' compaction point, so its keys are
        unique there and need not be mapped (Kafka maps the dirty section only); a clean
        record survives unless the map holds a newer record of its key."""
        header = parse_header(batch)
        if header.producer_id >= 0:
            self._last_batch_of[header.producer_id] = header.base_offset
        if header.is_control:
            self._close_txn(header.producer_id,
                            aborted=_control_type(header, batch) == CONTROL_ABORT)
            return
        if header.records_count == 0 or (clean and not header.is_transactional):
            return
        keys = [(r.key, header.base_offset + r.offset_delta)
                for r in iter_raw_records(_payload(header, batch), header.records_count)
                if r.key is not None]
        if header.is_transactional:
            self._open_txn.setdefault(header.producer_id, []).append((header.base_offset, keys))
            return
        self._note(keys)

    def _note(self, keys: list[tuple[bytes, int]]) -> None:
        latest = self.latest
        for key, offset in keys:
            if latest.get(key, -1) < offset:
                latest[key] = offset

    def _close_txn(self, producer_id: int, *, aborted: bool) -> None:
        for base, keys in self._open_txn.pop(producer_id, []):
            if aborted:
                self._aborted.add(base)
            else:
                self._note(keys)

    def _end_observe(self) -> None:
        if not self._observed_end:
            self._observed_end = True
            for batches in self._open_txn.values():
                self._undecided.update(base for base, _ in batches)
            self._open_txn.clear()

    # --- pass 2 -----------------------------------------------------------------------------

    def filter(self, batch: bytes, *, expired: bool) -> bytes | None:
        """The batch to keep in place of `batch` (see the module docstring), or None."""
        self._end_observe()
        header = parse_header(batch)
        stats = self.stats
        stats.batches_in += 1
        stats.records_in += header.records_count
        stats.bytes_in += header.size
        is_last = (header.producer_id >= 0
                   and self._last_batch_of.get(header.producer_id) == header.base_offset)
        if header.is_control:
            has_data = self._txn_survivors.pop(header.producer_id, False)
            if expired and not has_data and not is_last:
                stats.markers_removed += 1
                return None
            return self._kept(batch, header.records_count)
        if header.base_offset in self._undecided:
            if header.is_transactional:
                self._txn_survivors[header.producer_id] = True
            stats.keys_out += header.records_count
            return self._kept(batch, header.records_count)
        aborted = header.base_offset in self._aborted
        payload = _payload(header, batch) if header.records_count else b""
        records = list(iter_raw_records(payload, header.records_count))
        kept: list[RawRecord] = []
        base = header.base_offset
        for record in records:
            if aborted:
                stats.aborted_removed += 1
            elif record.key is None:
                stats.keyless_removed += 1
            elif self.latest.get(record.key, base + record.offset_delta) != (
                    base + record.offset_delta):
                pass  # a newer record of the key survives
            elif record.is_tombstone and expired:
                stats.tombstones_removed += 1
            else:
                kept.append(record)
        if kept and header.is_transactional:
            self._txn_survivors[header.producer_id] = True
        stats.keys_out += len(kept)
        if len(kept) == len(records):
            return self._kept(batch, len(records))
        if not kept and not is_last:
            return None
        out = rebuild_batch(header, batch, payload, kept)
        return self._kept(out, len(kept))

    def _kept(self, batch: bytes, records: int) -> bytes:
        self.stats.batches_out += 1
        self.stats.records_out += records
        self.stats.bytes_out += len(batch)
        return batch


def rebuild_batch(header: BatchHeader, batch: bytes, payload: bytes,
                  kept: list[RawRecord]) -> bytes:
    """`batch` holding only `kept` (raw records of its payload): same base offset, last
    offset delta, producer fields, attributes and codec; new count, max timestamp and CRC.
    An empty result is uncompressed (Kafka writes empty batches that way)."""
    attributes = header.attributes
    if kept:
        body = b"".join(payload[r.start : r.end] for r in kept)
        compressed = codecs.compress(header.compression, body)
        if attributes & ATTR_LOG_APPEND_TIME:
            max_ts = header.max_timestamp
        else:
            max_ts = header.base_timestamp + max(r.timestamp_delta for r in kept)
    else:
        compressed = b""
        attributes &= ~ATTR_COMPRESSION_MASK
        max_ts = header.max_timestamp
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out, 0, header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(compressed),
        header.partition_leader_epoch, header.magic, 0, attributes, header.last_offset_delta,
        header.base_timestamp, max_ts, header.producer_id, header.producer_epoch,
        header.base_sequence, len(kept),
    )
    out += compressed
    _CRC.pack_into(out, 17, compute_crc(out))
    return bytes(out)


def keyless_record_indexes(header: BatchHeader, batch: bytes | memoryview) -> list[int]:
    """Indexes (within the batch) of its records without a key: a compacted topic refuses
    them (Kafka's LogValidator). Decodes only the record framing, never copies values."""
    if not header.records_count or header.is_control:
        return []
    payload = _payload(header, bytes(batch))
    return [i for i, r in enumerate(iter_raw_records(payload, header.records_count))
            if r.key is None]


def batch_keys(batch: bytes) -> list[bytes | None]:
    """The key of every record of one batch (None for a keyless record), in order."""
    header = parse_header(batch)
    if not header.records_count:
        return []
    return [r.key for r in iter_raw_records(_payload(header, batch), header.records_count)]
