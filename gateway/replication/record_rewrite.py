"""Stored batches made ready for the remote, at byte level: the replicator's hot path.

A stored batch that can go alone (uncompressed after decompression, CreateTime, offset deltas
0..count-1, all at or after the read position, at least `forward_min_bytes` and not near the
send limit, no origin mark in it) is forwarded whole: its records section is sent as it is,
except that its first record gains the batch-level origin mark (`lw.origin`,
`lw.origin.offset` and `lw.origin.records`, gateway/replication/batches.py), and `frame` gives
it a new header (producer id, epoch, sequence, CRC).  No Python runs per record on that path:
a record copy of the first record and two copies of the bytes.  A batch marked that way that
arrives here (the other cluster forwarded it) is noted as inbound from its first record alone.

Such batches that follow each other without an offset between them (a backlog: what a
producer wrote in many requests) are forwarded as one run, up to the send limit: one produce
request instead of one per stored batch (each costs both clusters a request, an append and a
journal write, most of a forwarded batch's cost).  The run's first batch goes as above; the
records of the next ones are copied with only their offset and timestamp deltas rewritten
against the run's base (three varints per record, key, value and headers untouched), so the
run's records sit at consecutive offsets, as the mark's `lw.origin.records` says.

Smaller batches and the others are re-framed record by record, several into one batch:
records of several stored batches go into one outgoing batch under the replicator's producer id
and sequence.  Each record is copied as bytes: its attributes, key, value and headers are kept
verbatim; only its timestamp and offset deltas are rewritten (the new batch has its own base),
its header count grows by two and the origin headers (`lw.origin`, `lw.origin.offset`,
gateway/replication/batches.py) are appended.  Nothing is decoded into objects, which makes
this several times cheaper than decode + build_batch.  A record that already carries
`lw.origin` (it came from another cluster) is not copied; it is reported as inbound instead.

This module must never touch a socket, a log or the store, and never alters key, value or
user headers.
"""

from __future__ import annotations

import struct

import crc32c

from gateway.replication.batches import (
    ORIGIN_HEADER,
    ORIGIN_OFFSET_HEADER,
    ORIGIN_RECORDS_HEADER,
    batch_origin,
)
from protocols.kafka import compression as codecs
from protocols.kafka.errors import CorruptMessageError
from protocols.kafka.record_batch import (  # the record format's own varints
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    compute_crc,
    parse_header,
    read_bytes,
    read_varint,
    write_varint,
)

_CRC = struct.Struct(">I")
_OFFSET = struct.Struct(">q")
_COUNT = struct.Struct(">i")
FORWARD_MIN_BYTES = 16 << 10  # a stored batch this big goes alone, its records untouched
_FORWARD_MARGIN = 256  # room under the send limit for the mark (a cluster name is <= 64 bytes)
_MARK = ORIGIN_HEADER.encode()


def _encoded(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


_CACHED = 1 << 14  # deltas, counts and lengths of records under 16 KB: no call to encode
_VARINTS = tuple(_encoded(v) for v in range(_CACHED))
_BYTE = tuple(bytes((b,)) for b in range(256))


def _varint(value: int) -> bytes:
    return _VARINTS[value] if 0 <= value < _CACHED else _encoded(value)


_KEYED_MARK = _varint(len(_MARK)) + _MARK  # the header key with its length: not ".offset"
_KEYED_OFFSET = _varint(len(ORIGIN_OFFSET_HEADER)) + ORIGIN_OFFSET_HEADER.encode() + _varint(8)


def _origin_in(headers: bytes, count: int) -> tuple[str, int] | None:
    cluster, offset, pos = None, -1, 0
    for _ in range(count):
        key, pos = read_bytes(headers, pos)
        value, pos = read_bytes(headers, pos)
        if key == _MARK and value is not None:
            cluster = value.decode("utf-8", "replace")
        elif key == ORIGIN_OFFSET_HEADER.encode() and value is not None and len(value) == 8:
            offset = _OFFSET.unpack(value)[0]
    return None if cluster is None else (cluster, offset)


class OutgoingBatches:
    """Collects records into outgoing batches whose records take at most `max_bytes` (a lone
    record larger than that makes a batch of its own)."""

    def __init__(self, cluster: str, max_bytes: int, *,
                 forward_min_bytes: int | None = None) -> None:
        name = cluster.encode()
        self._origin = (_varint(len(_MARK)) + _MARK + _varint(len(name)) + name
                        + _varint(len(ORIGIN_OFFSET_HEADER)) + ORIGIN_OFFSET_HEADER.encode()
                        + _varint(8))
        self._records_key = (_varint(len(ORIGIN_RECORDS_HEADER))
                             + ORIGIN_RECORDS_HEADER.encode() + _varint(4))
        self.max_bytes = max_bytes
        self.forward_min_bytes = FORWARD_MIN_BYTES if forward_min_bytes is None \
            else forward_min_bytes
        self.forwarded = 0  # batches forwarded whole (the rest were re-framed)
        # (payload, record count, base timestamp, max timestamp, last source offset)
        self.groups: list[tuple[bytearray, int, int, int, int]] = []
        self._payload = bytearray()
        self._count = 0
        self._base_ts = 0
        self._max_ts = 0
        self._last_offset = -1
        # the open run of batches forwarded whole: its records (the first batch's, marked, then
        # the later ones' rebased), where the mark's record count is in them, the run's count,
        # timestamp range and last offset
        self._run_records = bytearray()
        self._count_at: int | None = None
        self._run_count = 0
        self._run_base_ts = 0
        self._run_max_ts = 0
        self._run_last = -1
        self.inbound: list[tuple[int, str, int]] = []

    def add(self, batch: bytes, start: int) -> None:
        """The records of one stored (committed, non-control) batch at or after `start`."""
        header = parse_header(batch)
        count = header.records_count
        if header.compression:
            data = bytes(codecs.decompress(header.compression,
                                           memoryview(batch)[HEADER_SIZE:header.size]))
            begin, end = 0, len(data)
        else:  # looked at in place: the mark is on the first record, the rest is not copied
            data = batch if isinstance(batch, bytes) else bytes(batch)
            begin, end = HEADER_SIZE, header.size
        whole = batch_origin(data, count, begin)
        if whole is not None:  # another cluster forwarded this batch here
            if header.last_offset >= start:
                self.inbound.append((header.last_offset, whole.cluster, whole.first_offset
                                     + header.last_offset_delta - whole.first_delta))
            return
        if (header.base_offset >= start and header.timestamp_type == 0
                and header.last_offset_delta == count - 1
                and self.forward_min_bytes <= end - begin <= self.max_bytes - _FORWARD_MARGIN
                and data.find(_MARK, begin, end) < 0):
            self._forward(data, begin, end, header.base_offset, count,
                          header.base_timestamp, header.max_timestamp)
            self.forwarded += 1
            return
        self._close_run()
        payload = data[begin:end] if begin or end != len(data) else data
        if self._all_inbound(payload, header.records_count, header.last_offset, start):
            return
        log_append = header.timestamp_type == 1
        pos = 0
        for _ in range(header.records_count):
            length, pos = read_varint(payload, pos)
            end = pos + length
            if length < 0 or end > len(payload):
                raise CorruptMessageError("record runs past the batch")
            attributes = payload[pos]
            ts_delta, p = read_varint(payload, pos + 1)
            offset_delta, p = read_varint(payload, p)
            kv_start = p
            _, p = read_bytes(payload, p)
            _, p = read_bytes(payload, p)
            kv_end = p
            header_count, p = read_varint(payload, p)
            headers = payload[p:end]
            pos = end
            offset = header.base_offset + offset_delta
            if offset < start:
                continue
            if _MARK in headers:
                origin = _origin_in(headers, header_count)
                if origin is not None:
                    self.inbound.append((offset, origin[0], origin[1]))
                    continue
            ts = header.max_timestamp if log_append else header.base_timestamp + ts_delta
            self._append(attributes, ts, payload[kv_start:kv_end], header_count, headers,
                         offset)

    def _forward(self, data: bytes, begin: int, end: int, base_offset: int, count: int,
                 base_ts: int, max_ts: int) -> None:
        """One forwardable batch: the next of the open run if it follows it without a gap and
        fits, else the first of a new run."""
        if self._count_at is not None and base_offset == self._run_last + 1 and (
                len(self._run_records) + end - begin <= self.max_bytes - _FORWARD_MARGIN):
            mark = len(self._run_records)
            try:
                _rebased(data, begin, end, count, self._run_count, base_ts - self._run_base_ts,
                         self._run_records)
            except (CorruptMessageError, IndexError):  # records the broker never looked into
                del self._run_records[mark:]  # (it stores batches whole): it goes alone, as is
            else:
                # rebased deltas can be longer than stored ones (a batch a minute later: three
                # bytes per timestamp delta, not one): the run must fit as it will leave
                if len(self._run_records) <= self.max_bytes - _FORWARD_MARGIN:
                    self._run_count += count
                    self._run_max_ts = max(self._run_max_ts, max_ts)
                    self._run_last = base_offset + count - 1
                    return
                del self._run_records[mark:]  # it starts the next run
        self._close_group()
        self._run_records, self._count_at = self._forwarded(data, begin, end, base_offset, count)
        self._run_count, self._run_base_ts, self._run_max_ts = count, base_ts, max_ts
        self._run_last = base_offset + count - 1

    def _close_run(self) -> None:
        if self._count_at is None:
            return
        _COUNT.pack_into(self._run_records, self._count_at, self._run_count)  # the whole run
        self.groups.append((self._run_records, self._run_count, self._run_base_ts,
                            self._run_max_ts, self._run_last))
        self._count_at, self._run_records = None, bytearray()

    def _forwarded(self, data: bytes, begin: int, end: int, base_offset: int,
                   count: int) -> tuple[bytearray, int]:
        """The records section data[begin:end] with the batch-level mark (for `count` records
        from `base_offset` on) added to its first record, and where that count is in it."""
        length, pos = read_varint(data, begin)
        first_end = pos + length
        _, p = read_varint(data, pos + 1)  # attributes, then the timestamp delta
        delta, p = read_varint(data, p)
        _, p = read_bytes(data, p)
        _, p = read_bytes(data, p)
        header_count, headers_at = read_varint(data, p)
        if first_end > end or headers_at > first_end:
            raise CorruptMessageError("record runs past the batch")
        record = b"".join((data[pos:p], _varint(header_count + 3), data[headers_at:first_end],
                           self._origin, _OFFSET.pack(base_offset + delta), self._records_key,
                           _COUNT.pack(count)))
        out = bytearray(_varint(len(record)))
        out += record
        count_at = len(out) - _COUNT.size
        out += memoryview(data)[first_end:end]
        return out, count_at

    def _all_inbound(self, payload: bytes, count: int, last_offset: int, start: int) -> bool:
        """A batch that another cluster's replicator wrote (an `lw.origin` header in each of its
        records, the two origin headers last in the last record, as this module writes them):
        note only its last record as inbound and skip the record-by-record walk."""
        if payload.count(_KEYED_MARK) != count or last_offset < start:
            return False
        at = payload.rfind(_KEYED_MARK) + len(_KEYED_MARK)
        name, at = read_bytes(payload, at)
        if name is None or payload[at:at + len(_KEYED_OFFSET)] != _KEYED_OFFSET:
            return False
        at += len(_KEYED_OFFSET)
        if len(payload) - at != 8:  # the offset value ends the batch
            return False
        self.inbound.append((last_offset, name.decode("utf-8", "replace"),
                             _OFFSET.unpack_from(payload, at)[0]))
        return True

    def _append(self, attributes: int, ts: int, key_value: bytes, header_count: int,
                headers: bytes, offset: int) -> None:
        for _ in range(2):  # the record framed in this group, or else as the first of a new one
            if not self._count:
                self._base_ts = self._max_ts = ts
            delta = ts - self._base_ts
            record = b"".join((
                _BYTE[attributes], _VARINTS[delta] if 0 <= delta < _CACHED else _encoded(delta),
                _varint(self._count), key_value, _varint(header_count + 2), headers,
                self._origin, _OFFSET.pack(offset)))
            if not self._count or len(self._payload) + len(record) + 5 <= self.max_bytes:
                break
            self._close_group()
        size = len(record)
        self._payload += _VARINTS[size] if size < _CACHED else _encoded(size)
        self._payload += record
        self._count += 1
        self._max_ts = max(self._max_ts, ts)
        self._last_offset = offset

    def _close_group(self) -> None:
        self._close_run()
        if self._count:
            self.groups.append((self._payload, self._count, self._base_ts, self._max_ts,
                                self._last_offset))
        self._payload, self._count = bytearray(), 0

    def finish(self) -> list[tuple[bytearray, int, int, int, int]]:
        """The groups: (records payload, count, base ts, max ts, last source offset)."""
        self._close_group()
        return self.groups


def _rebased(data: bytes, begin: int, end: int, count: int, offset_shift: int, ts_shift: int,
             out: bytearray) -> None:
    """Append the `count` records of data[begin:end] to `out` with `offset_shift` added to each
    offset delta and `ts_shift` to each timestamp delta; the rest of each record as it is.
    (Varints of one and two bytes, nearly all of them, are read inline: this runs per record.)"""
    view = memoryview(data)
    pos = begin
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            length, p = (b >> 1) ^ -(b & 1), pos + 1
        elif data[pos + 1] < 0x80:
            raw = (b & 0x7F) | data[pos + 1] << 7
            length, p = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            length, p = read_varint(data, pos)
        record_end = p + length
        if length < 0 or record_end > end:
            raise CorruptMessageError("record runs past the batch")
        b = data[p + 1]
        if b < 0x80:
            ts_delta, q = (b >> 1) ^ -(b & 1), p + 2
        else:
            ts_delta, q = read_varint(data, p + 1)
        b = data[q]
        if b < 0x80:
            offset_delta, q = (b >> 1) ^ -(b & 1), q + 1
        else:
            offset_delta, q = read_varint(data, q)
        ts_delta += ts_shift
        offset_delta += offset_shift
        head = (_BYTE[data[p]]
                + (_VARINTS[ts_delta] if 0 <= ts_delta < _CACHED else _encoded(ts_delta))
                + (_VARINTS[offset_delta] if 0 <= offset_delta < _CACHED
                   else _encoded(offset_delta)))
        size = len(head) + record_end - q
        out += _VARINTS[size] if size < _CACHED else _encoded(size)
        out += head
        out += view[q:record_end]
        pos = record_end
    if pos != end:
        raise CorruptMessageError("records do not fill the batch")


def frame(payload: bytes | bytearray, count: int, base_ts: int, max_ts: int, producer_id: int,
          producer_epoch: int, base_sequence: int) -> bytes:
    """An uncompressed v2 batch around `count` framed records (base offset 0, CreateTime)."""
    header = bytearray(HEADER_SIZE)
    HEADER.pack_into(header, 0, 0, HEADER_SIZE - LOG_OVERHEAD + len(payload), -1, 2, 0, 0,
                     count - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
                     count)
    # the CRC of the header's tail continued over the payload: the payload is copied once
    _CRC.pack_into(header, 17, crc32c.crc32c(payload, compute_crc(header)))
    return b"".join((header, payload))
