"""InitProducerId (key 22): producer ids for idempotent producers.

Without a transactional id every call allocates a fresh producer id from the topic service's
durable counter, at epoch 0 (a re-initialising producer, KIP-360, simply gets a new id: the
broker keeps no per-producer epoch state across ids).  Transactions are not implemented yet: a
transactional id is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a non-retriable code,
so clients fail fast with a clear error instead of retrying a coordinator forever.

This module must never hand out the same producer id twice.
"""

from __future__ import annotations

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode


async def handle_init_producer_id(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    if body.get("transactional_id") is not None:
        return {"throttle_time_ms": 0,
                "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": -1, "producer_epoch": -1}
    producer_id = await ctx.topics.allocate_producer_id()
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id,
            "producer_epoch": 0}
