"""InitProducerId (key 22): producer ids for idempotent producers.

Without a transactional id every call allocates a fresh producer id from the topic service's
durable counter, at epoch 0 (a re-initialising producer, KIP-360, simply gets a new id: the
broker keeps no per-producer epoch state across ids).  A transactional id goes to the
transaction coordinator (handlers/transactions.py), which keeps one producer id per
transactional id and bumps its epoch; a broker without one answers COORDINATOR_NOT_AVAILABLE.

This module must never hand out the same producer id twice.
"""

from __future__ import annotations

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.handlers.transactions import init_transactional_producer


async def handle_init_producer_id(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    if body.get("transactional_id") is not None:
        return await init_transactional_producer(ctx, header, body)
    producer_id = await ctx.topics.allocate_producer_id()
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id,
            "producer_epoch": 0}
