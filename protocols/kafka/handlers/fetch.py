"""Fetch (key 1): stored record batches from each partition, with long polling.

The batches go out exactly as they were stored (the first batch holding the fetch offset
onwards); the client skips records below its offset.  Limits follow KIP-74: each partition gets
at most `partition_max_bytes`, the response at most `max_bytes`, except that the first batch of
the first partition with data is always returned whole so a consumer can never get stuck behind
a batch larger than its limits.  When less than `min_bytes` is available the request waits up
to `max_wait_ms`, woken as soon as a caught-up partition gets new data
(`PartitionLog.wait_for_data`).

isolation_level=1 (read_committed): data only below the last stable offset (a batch never
straddles it: the LSO is a batch's first offset or the high watermark), with the aborted
transactions overlapping the returned range so the client drops their records; a waiting
read_committed fetch is woken when the LSO moves past its offset.  read_uncommitted reads up to
the high watermark and gets a null aborted list.  Control batches are returned like any other
(clients skip them).

Fetch sessions (KIP-227): the broker keeps no session cache.  Full fetches are answered with
session id 0 (no session created); an incremental fetch (epoch > 0) gets
FETCH_SESSION_ID_NOT_FOUND, after which clients fall back to full fetches.

This module must never decode records or hold a partition's data beyond one response.
"""

from __future__ import annotations

import struct
from typing import Any

import trio

from protocols.kafka.acl_model import OP_READ, RES_TOPIC
from protocols.kafka.broker_api import PartitionLogApi, RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode, OffsetOutOfRangeError
from protocols.kafka.handlers.error_responses import ZERO_UUID, error_code_of
from protocols.kafka.handlers.topic_lookup import open_partition, topic_by_id

READ_COMMITTED = 1
MAX_WAIT_CAP_S = 60.0
_BASE_OFFSET = struct.Struct(">q")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23


class _PartitionFetch:
    """One requested partition: where to read, what was read, and its answer fields."""

    __slots__ = ("topic", "partition", "offset", "max_bytes", "log", "error", "batches",
                 "size", "high_watermark", "last_stable_offset", "log_start_offset", "aborted")

    def __init__(self, topic: str | None, partition: int, offset: int, max_bytes: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.max_bytes = max_bytes
        self.log: PartitionLogApi | None = None
        self.error: int = ErrorCode.NONE
        self.batches: list[bytes] = []
        self.size = 0
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.aborted: list[tuple[int, int]] = []

    def caught_up(self, read_committed: bool) -> bool:
        if self.log is None or self.error:
            return False
        end = self.log.last_stable_offset if read_committed else self.log.high_watermark
        return self.offset >= end

    def answer(self, version: int, read_committed: bool) -> dict:
        return {
            "partition_index": self.partition,
            "error_code": int(self.error),
            "high_watermark": self.high_watermark,
            "last_stable_offset": self.last_stable_offset,
            "log_start_offset": self.log_start_offset,
            "aborted_transactions": [
                {"producer_id": pid, "first_offset": first} for pid, first in self.aborted
            ] if read_committed else None,
            "preferred_read_replica": -1,
            # The stored batches as they are: the codec writes a sequence of buffers without
            # joining them first (one copy of a 10 MB answer less).
            "records": self.batches if self.batches else b"",
        }


async def _read_partition(pf: _PartitionFetch, budget: int, first: bool,
                          read_committed: bool) -> None:
    """Fill `pf` with batches within `budget` bytes (`first`: the first batch goes regardless)."""
    pf.batches, pf.size, pf.aborted = [], 0, []
    plog = pf.log
    if plog is None or pf.error:
        return
    try:
        pf.high_watermark = plog.high_watermark
        pf.last_stable_offset = plog.last_stable_offset
        pf.log_start_offset = plog.log_start_offset
        end = pf.last_stable_offset if read_committed else pf.high_watermark
        if pf.offset < pf.log_start_offset or pf.offset > pf.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {pf.offset} outside [{pf.log_start_offset}, {pf.high_watermark}]"
            )
        limit = min(pf.max_bytes, budget)
        if pf.offset >= end or (limit <= 0 and not first):
            return
        batches = await plog.read(pf.offset, max(limit, 1))
        kept: list[bytes] = []
        size = 0
        for batch in batches:
            if read_committed and _BASE_OFFSET.unpack_from(batch, 0)[0] >= end:
                break
            if kept or not first:
                if size + len(batch) > limit:
                    break
            kept.append(batch)
            size += len(batch)
        pf.batches, pf.size = kept, size
        if read_committed and kept:
            last = kept[-1]
            end_of_read = (_BASE_OFFSET.unpack_from(last, 0)[0]
                           + _LAST_OFFSET_DELTA.unpack_from(last, _LAST_OFFSET_DELTA_AT)[0] + 1)
            pf.aborted = plog.aborted_transactions(pf.offset, end_of_read)
    except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
        pf.error = error_code_of(exc)


DEFAULT_FETCH_MAX_BYTES = 55 * 1024 * 1024  # Kafka's fetch.max.bytes


async def _read_all(fetches: list[_PartitionFetch], max_bytes: int, read_committed: bool) -> int:
    total = 0
    for pf in fetches:
        await _read_partition(pf, max_bytes - total, total == 0, read_committed)
        total += pf.size
    return total


async def _wait_for_any(fetches: list[_PartitionFetch], timeout_s: float,
                        read_committed: bool) -> None:
    """Sleep until a caught-up partition gets data past its fetch offset, or `timeout_s`."""
    waiting = [pf for pf in fetches if pf.caught_up(read_committed)]
    if not waiting:
        await trio.sleep(timeout_s)
        return

    async with trio.open_nursery() as nursery:
        async def wait_one(pf: _PartitionFetch) -> None:
            assert pf.log is not None
            await pf.log.wait_for_data(pf.offset, timeout_s, committed=read_committed)
            nursery.cancel_scope.cancel()

        for pf in waiting:
            nursery.start_soon(wait_one, pf)


async def handle_fetch(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    version = header.api_version
    if version >= 7 and body.get("session_epoch", -1) > 0:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                "session_id": 0, "responses": []}
    read_committed = body.get("isolation_level", 0) == READ_COMMITTED
    # The broker's fetch.max.bytes caps what a client may ask for in one answer.
    max_bytes = min(int(body.get("max_bytes", 0x7FFFFFFF)),
                    int(getattr(ctx.broker.config, "fetch_max_bytes", DEFAULT_FETCH_MAX_BYTES)))
    min_bytes = int(body.get("min_bytes", 0))
    max_wait_s = min(max(int(body.get("max_wait_ms", 0)), 0) / 1000.0, MAX_WAIT_CAP_S)

    by_topic: list[tuple[Any, Any, list[_PartitionFetch]]] = []
    fetches: list[_PartitionFetch] = []
    for t in body.get("topics") or []:
        topic_id = t.get("topic_id", ZERO_UUID)
        unknown_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if version >= 13:
            info = topic_by_id(ctx, topic_id)
            name = info.name if info is not None else None
            unknown_code = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            name = t.get("topic")
        parts: list[_PartitionFetch] = []
        for p in t.get("partitions") or []:
            pf = _PartitionFetch(name, int(p.get("partition", 0)), int(p.get("fetch_offset", 0)),
                                 int(p.get("partition_max_bytes", 0)))
            if name is None:
                pf.error = unknown_code
            elif not ctx.authorize(OP_READ, RES_TOPIC, name):
                pf.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                try:
                    pf.log = await open_partition(ctx, name, pf.partition, log_only=True)
                except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
                    pf.error = error_code_of(exc)
                    if pf.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and version >= 13:
                        pf.error = ErrorCode.UNKNOWN_TOPIC_ID
            parts.append(pf)
            fetches.append(pf)
        if version >= 12 and name is not None and topic_id == ZERO_UUID:
            info = ctx.topics.topics().get(name)
            topic_id = info.topic_id if info is not None else ZERO_UUID
        by_topic.append((name if version < 13 else t.get("topic"), topic_id, parts))

    deadline = trio.current_time() + max_wait_s
    while True:
        total = await _read_all(fetches, max_bytes, read_committed)
        remaining = deadline - trio.current_time()
        if total >= min_bytes or remaining <= 0 or any(pf.error for pf in fetches):
            break
        await _wait_for_any(fetches, remaining, read_committed)

    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": name,
                "topic_id": topic_id,
                "partitions": [pf.answer(version, read_committed) for pf in parts],
            }
            for name, topic_id, parts in by_topic
        ],
    }
