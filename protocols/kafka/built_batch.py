"""A record batch this broker encoded itself, as opposed to bytes a client sent.

A partition log checks every client batch before giving it offsets: framing, counts, CRC-32C
(gateway/topics/batch_checks.py).  A batch the broker encoded a moment ago from fields it had
decoded (a RocketMQ send, a delayed or transactional message moved between topics) passes
those checks by construction, so checking it again proves nothing and costs a RocketMQ send
about fifteen calls and a CRC over the message.  Such a batch travels as a BuiltBatch, which
`PartitionLog.append_built` takes and `PartitionLog.append` (client bytes) never sees: a
client's bytes are `bytes` or a `memoryview`, never a BuiltBatch, so they cannot reach the
trusted path by mistake.  The topic's own limits (max.message.bytes, timestamp distance, keys
on a compacted topic) are still checked on both paths.

This module must never wrap bytes that it or an encoder of this broker did not write.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocols.kafka.record_batch import BatchHeader, RecordInput, build_batch, parse_header


class BuiltBatch:
    """One v2 batch (base offset 0) and its header, both written by this broker's encoders."""

    __slots__ = ("data", "header")

    def __init__(self, data: bytes, header: BatchHeader) -> None:
        self.data = data
        self.header = header


def built_batch(records: Sequence[RecordInput]) -> BuiltBatch:
    """build_batch(records), marked as encoded here."""
    data = build_batch(records)
    return BuiltBatch(data, parse_header(data))
