"""What a produced batch must be before a partition log gives it an offset.

A produce to a partition carries exactly one v2 record batch: a v0/v1 message set is first
converted to one (so it is appended all or nothing); control batches come only from the
transaction coordinator; the batch may not exceed max.message.bytes; its header, CRC and
timestamps are checked (message.timestamp.difference.max.ms); and on a compacted topic every
record needs a key (refused as INVALID_RECORD with one record error per keyless record, as
Kafka does).  Only headers are parsed, and the key check reads record keys in place.  The
idempotent producer's sequence rules come after these checks (partition_log.py,
producer_state.py).

This module must never decode records to re-encode them, nor keep any state.
"""

from __future__ import annotations

from gateway.topics.partition_log_config import PartitionLogConfig
from protocols.kafka.batch_compaction import keyless_record_indexes
from protocols.kafka.built_batch import BuiltBatch
from protocols.kafka.errors import InvalidRecordError, MessageTooLargeError
from protocols.kafka.legacy_message_set import convert_legacy_to_batch
from protocols.kafka.record_batch import (
    BatchHeader,
    check_timestamps,
    iter_batches,
    records_magic,
    validate_batch,
)


def checked_batch(
    records: bytes | memoryview, *, log_name: str, now_ms: int, max_message_bytes: int,
    max_timestamp_diff_ms: int | None, compacted: bool,
) -> tuple[BatchHeader, memoryview]:
    """The header and bytes of the one batch in `records`, or the protocol error refusing it."""
    data: bytes | bytearray | memoryview = records
    if records_magic(records) < 2:
        data = convert_legacy_to_batch(records)  # one batch: appended all or nothing
    batches = list(iter_batches(data))
    if len(batches) != 1:
        raise InvalidRecordError(
            f"a produce must carry exactly one v2 batch, got {len(batches)}"
        )
    header, view = batches[0]
    if header.is_control:
        raise InvalidRecordError("control batches are written by the transaction coordinator")
    if header.size > max_message_bytes:
        raise MessageTooLargeError(
            f"batch of {header.size} bytes exceeds max.message.bytes {max_message_bytes}"
        )
    validate_batch(header, view, now_ms=now_ms, max_timestamp_diff_ms=max_timestamp_diff_ms)
    if compacted:
        _refuse_keyless(header, view, log_name)
    return header, view


def checked_built(batch: BuiltBatch, limits: PartitionLogConfig, *, log_name: str,
                  now_ms: int) -> tuple[BatchHeader, memoryview]:
    """checked_batch for a batch this broker encoded (built_batch.py): its framing, counts and
    CRC are its encoder's and not checked again; the topic's `limits` still are."""
    if type(batch) is not BuiltBatch:  # client bytes never take this path
        raise TypeError(f"a BuiltBatch is needed here, not {type(batch).__name__}")
    header = batch.header
    if header.size > limits.max_message_bytes:
        raise MessageTooLargeError(
            f"batch of {header.size} bytes exceeds max.message.bytes {limits.max_message_bytes}"
        )
    if limits.max_timestamp_diff_ms is not None:
        check_timestamps(header, now_ms, limits.max_timestamp_diff_ms)
    view = memoryview(batch.data)
    if limits.compacted:
        _refuse_keyless(header, view, log_name)
    return header, view


def _refuse_keyless(header: BatchHeader, view: memoryview, log_name: str) -> None:
    keyless = keyless_record_indexes(header, view)
    if keyless:
        message = f"Compacted topic cannot accept message without key in {log_name}."
        error = InvalidRecordError(
            f"One or more records have been rejected: {len(keyless)} without a key"
        )
        error.record_errors = tuple((i, message) for i in keyless)
        raise error
