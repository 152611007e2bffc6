"""What crosses to another cluster, sans-IO: committed records in, stamped batches out.

A replicator reads stored batches of a local partition and keeps only what a read_committed
consumer would see (no control batches, nothing of an aborted transaction) and only what was
written in this cluster: every replicated record carries two headers,

    lw.origin          the name of the cluster where it was first written
    lw.origin.offset   its offset there (8 bytes, big-endian)

and a record that already carries `lw.origin` is never sent on, so nothing loops between
clusters that replicate to each other.  The outgoing batch keeps each record's key, value,
headers and timestamp (as CreateTime) and its order, under the replicator's own idempotent
producer id and sequence (gateway/replication/record_rewrite.py frames it).

A stored batch big enough to go alone is forwarded whole instead, its records' bytes as they
are (gateway/replication/record_rewrite.py): then only its first record carries the mark, with
a third header,

    lw.origin.records  how many records the batch holds (4 bytes, big-endian)

which says that the whole batch came from that cluster, its records at consecutive offsets
there from `lw.origin.offset` on (the batch's offset deltas run 0..count-1).  A consumer that
reads the batch from its first record knows every record's origin.

This module must never touch a socket, a log or the metadata store.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from protocols.kafka import compression as codecs
from protocols.kafka.record_batch import (
    CONTROL_ABORT,
    MAX_SEQUENCE,
    Record,
    decode_records,
    parse_control_record,
    parse_header,
    read_bytes,
    read_varint,
)

ORIGIN_HEADER = "lw.origin"
ORIGIN_OFFSET_HEADER = "lw.origin.offset"
ORIGIN_RECORDS_HEADER = "lw.origin.records"
_OFFSET = struct.Struct(">q")
_COUNT = struct.Struct(">i")
_MARK = ORIGIN_HEADER.encode()
_OFFSET_KEY = ORIGIN_OFFSET_HEADER.encode()
_RECORDS_KEY = ORIGIN_RECORDS_HEADER.encode()


class BatchOrigin(NamedTuple):
    """The mark of a forwarded batch (on its first record): where the batch came from."""

    cluster: str
    first_offset: int  # the origin offset of the batch's first record
    first_delta: int  # that record's offset delta in the batch
    records: int


def batch_origin(payload: bytes, count: int, begin: int = 0) -> BatchOrigin | None:
    """The batch-level mark on the first of the `count` uncompressed records that start at
    `begin` of `payload` (only that record is read), or None.  A mark whose count is not the
    batch's is no mark."""
    if count <= 0:
        return None
    length, pos = read_varint(payload, begin)
    end = pos + length
    if payload.find(_RECORDS_KEY, pos, end) < 0:
        return None
    _, pos = read_varint(payload, pos + 1)  # attributes, then the timestamp delta
    delta, pos = read_varint(payload, pos)
    for _ in range(2):  # key and value, skipped without a copy
        size, pos = read_varint(payload, pos)
        pos += max(size, 0)
    headers, pos = read_varint(payload, pos)
    if pos > end:
        return None
    cluster = offset = records = None
    for _ in range(headers):
        key, pos = read_bytes(payload, pos)
        value, pos = read_bytes(payload, pos)
        if value is None:
            continue
        if key == _MARK:
            cluster = value.decode("utf-8", "replace")
        elif key == _OFFSET_KEY and len(value) == 8:
            offset = _OFFSET.unpack(value)[0]
        elif key == _RECORDS_KEY and len(value) == 4:
            records = _COUNT.unpack(value)[0]
    if pos > end or cluster is None or offset is None or records != count:
        return None
    return BatchOrigin(cluster, offset, delta, records)


def record_origins(batch: bytes) -> list[tuple[str, int] | None]:
    """(cluster, offset there) of each record of one stored batch, whichever way it was marked
    (each record, or the batch on its first record); None for a record written here."""
    records = decode_records(batch)
    if not records:
        return []
    first = origin_of(records[0])
    whole = dict(records[0].headers).get(ORIGIN_RECORDS_HEADER)
    if first is not None and whole is not None and _COUNT.unpack(whole)[0] == len(records):
        base = records[0].offset
        return [(first[0], first[1] + r.offset - base) for r in records]
    return [origin_of(r) for r in records]


def origin_of(record: Record) -> tuple[str, int] | None:
    """(cluster, offset there) of a replicated record; None for one written here."""
    cluster = offset = None
    for key, value in record.headers:
        if key == ORIGIN_HEADER and value is not None:
            cluster = value.decode("utf-8", "replace")
        elif key == ORIGIN_OFFSET_HEADER and value is not None and len(value) == 8:
            offset = _OFFSET.unpack(value)[0]
    if cluster is None:
        return None
    return cluster, -1 if offset is None else offset


def committed_batches(batches: Iterable[bytes], end: int,
                      aborted: Iterable[tuple[int, int]]) -> tuple[list[bytes], int | None]:
    """The batches a read_committed consumer would get records from, and the offset after the
    last batch looked at (None: the first batch reaches past `end`).

    `aborted`: (producer id, first offset) of each aborted transaction overlapping the read
    (the partition log's answer, as a Fetch response carries it); control batches and batches
    of an aborted transaction are left out.  Batches must end below `end` (the last stable
    offset) to count.
    """
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    kept: list[bytes] = []
    next_offset: int | None = None
    for data in batches:
        header = parse_header(data)
        if header.last_offset >= end:
            break
        next_offset = header.last_offset + 1
        while pending and pending[0][1] <= header.last_offset:
            aborting.add(pending.pop(0)[0])
        if header.is_control:
            for marker in decode_records(data):
                if parse_control_record(marker).control_type == CONTROL_ABORT:
                    aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        kept.append(data)
    return kept, next_offset


def whole_batches(records_blob: bytes) -> list[bytes]:
    """The whole batches of a fetched blob (a Fetch answer may end in a partial one)."""
    out: list[bytes] = []
    pos = 0
    while len(records_blob) - pos >= 61:
        size = parse_header(records_blob, pos).size
        if pos + size > len(records_blob):
            break
        out.append(records_blob[pos:pos + size])
        pos += size
    return out


class OriginRecord(NamedTuple):
    """The last record from a cluster found in the remote: where it is there, where it came
    from, and the idempotent producer id, epoch and sequence number it was written with."""

    offset: int
    origin_offset: int
    producer_id: int
    producer_epoch: int
    sequence: int


def last_origin_offset(records_blob: bytes, cluster: str) -> tuple[int, int] | None:
    """In a fetched records blob of the remote: (remote offset, origin offset) of the last
    record that came from `cluster`, or None."""
    found = last_origin_record(records_blob, cluster)
    return None if found is None else (found.offset, found.origin_offset)


def last_origin_record(records_blob: bytes, cluster: str) -> OriginRecord | None:
    """The last record of a fetched records blob of the remote that came from `cluster`."""
    found: OriginRecord | None = None
    name = cluster.encode()
    zigzag = 2 * len(name)  # the header value's length as a varint (names are <= 64 bytes)
    length = bytes([zigzag]) if zigzag < 0x80 else bytes([zigzag & 0x7F | 0x80, zigzag >> 7])
    mark = ORIGIN_HEADER.encode() + length + name
    for data in whole_batches(records_blob):
        header = parse_header(data)
        if header.is_control or (header.compression == codecs.NONE and mark not in data):
            continue  # cheap: the replicator sends uncompressed batches with this in them
        if header.compression == codecs.NONE:
            whole = batch_origin(data, header.records_count, 61)
            if whole is not None:  # a forwarded batch: its last record, from the header
                if whole.cluster == cluster:
                    found = OriginRecord(
                        header.last_offset,
                        whole.first_offset + header.last_offset_delta - whole.first_delta,
                        header.producer_id, header.producer_epoch, header.last_sequence)
                continue
        for record in decode_records(data):
            origin = origin_of(record)
            if origin is not None and origin[0] == cluster:
                sequence = (header.base_sequence + record.offset - header.base_offset) % (
                    MAX_SEQUENCE + 1)
                found = OriginRecord(record.offset, origin[1], header.producer_id,
                                     header.producer_epoch, sequence)
    return found


def blob_end(records_blob: bytes) -> int | None:
    """The offset after the last whole batch of a fetched blob (None: no whole batch)."""
    batches = whole_batches(records_blob)
    return parse_header(batches[-1]).last_offset + 1 if batches else None
