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
)

ORIGIN_HEADER = "lw.origin"
ORIGIN_OFFSET_HEADER = "lw.origin.offset"
_OFFSET = struct.Struct(">q")


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
            continue  # cheap: the replicator sends uncompressed batches with this in each
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
