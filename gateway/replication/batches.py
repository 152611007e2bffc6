"""What crosses to another cluster, sans-IO: committed records in, stamped batches out.

A replicator reads stored batches of a local partition and keeps only what a read_committed
consumer would see (no control batches, nothing of an aborted transaction) and only what was
written in this cluster: every replicated record carries two headers,

    lw.origin          the name of the cluster where it was first written
    lw.origin.offset   its offset there (8 bytes, big-endian)

and a record that already carries `lw.origin` is never sent on, so nothing loops between
clusters that replicate to each other.  The outgoing batch keeps each record's key, value,
headers and timestamp (as CreateTime) and its order, under the replicator's own idempotent
producer id and sequence.

This module must never touch a socket, a log or the metadata store.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from protocols.kafka import compression as codecs
from protocols.kafka.record_batch import (
    CONTROL_ABORT,
    Record,
    build_batch,
    decode_records,
    parse_control_record,
    parse_header,
)

ORIGIN_HEADER = "lw.origin"
ORIGIN_OFFSET_HEADER = "lw.origin.offset"
_OFFSET = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class ReadSlice:
    """The records of a read worth sending, and where the next read starts."""

    records: list[Record]  # local-origin, committed, in offset order
    inbound: list[tuple[int, str, int]]  # (local offset, origin cluster, origin offset)
    next_offset: int


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


def committed_slice(batches: Iterable[bytes], start: int, end: int,
                    aborted: Iterable[tuple[int, int]]) -> ReadSlice:
    """The records of `batches` in [start, end) a read_committed consumer would get, split into
    local-origin ones (to send) and replicated-in ones (`inbound`, for offset translation).

    `aborted`: (producer id, first offset) of each aborted transaction overlapping the range
    (the partition log's answer, as a Fetch response carries it).  Batches must end below `end`
    (the last stable offset) to count; `next_offset` is where the next read starts.
    """
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    records: list[Record] = []
    inbound: list[tuple[int, str, int]] = []
    next_offset = start
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
        for record in decode_records(data):
            if record.offset < start:
                continue
            origin = origin_of(record)
            if origin is None:
                records.append(record)
            else:
                inbound.append((record.offset, origin[0], origin[1]))
    return ReadSlice(records, inbound, next_offset)


def stamped(record: Record, cluster: str) -> Record:
    """The record as it goes out: its own headers, then where it came from."""
    headers = [*record.headers, (ORIGIN_HEADER, cluster.encode()),
               (ORIGIN_OFFSET_HEADER, _OFFSET.pack(record.offset))]
    return Record(record.offset, record.timestamp, record.key, record.value, headers)


def outgoing_batches(records: list[Record], cluster: str, *, max_bytes: int,
                     compression: int = codecs.NONE) -> Iterator[list[Record]]:
    """Split stamped records into groups whose batch stays under about `max_bytes`."""
    group: list[Record] = []
    size = 0
    for record in records:
        out = stamped(record, cluster)
        weight = 32 + len(out.key or b"") + len(out.value or b"") + sum(
            len(k) + len(v or b"") + 4 for k, v in out.headers)
        if group and size + weight > max_bytes:
            yield group
            group, size = [], 0
        group.append(out)
        size += weight
    if group:
        yield group


def encode_batch(group: list[Record], producer_id: int, producer_epoch: int,
                 base_sequence: int, compression: int = codecs.NONE) -> bytes:
    return build_batch(group, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence, compression=compression)


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


def last_origin_offset(records_blob: bytes, cluster: str) -> tuple[int, int] | None:
    """In a fetched records blob of the remote: (remote offset, origin offset) of the last
    record that came from `cluster`, or None."""
    found: tuple[int, int] | None = None
    for data in whole_batches(records_blob):
        if parse_header(data).is_control:
            continue
        for record in decode_records(data):
            origin = origin_of(record)
            if origin is not None and origin[0] == cluster:
                found = (record.offset, origin[1])
    return found


def blob_end(records_blob: bytes) -> int | None:
    """The offset after the last whole batch of a fetched blob (None: no whole batch)."""
    batches = whole_batches(records_blob)
    return parse_header(batches[-1]).last_offset + 1 if batches else None
