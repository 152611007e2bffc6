"""InitProducerId (key 22): producer ids for idempotent producers.

Without a transactional id every call allocates a fresh producer id from the topic service's
durable counter, at epoch 0 (a re-initialising producer, KIP-360, simply gets a new id: the
broker keeps no per-producer epoch state across ids).  A transactional id goes to the
transaction coordinator (handlers/transactions.py), which keeps one producer id per
transactional id and bumps its epoch; a broker without one answers COORDINATOR_NOT_AVAILABLE.

Without a transactional id the principal needs IDEMPOTENT_WRITE on the cluster or WRITE on
some topic (KIP-679); with one, WRITE on it (transactions.py).

This module must never hand out the same producer id twice.
"""

from __future__ import annotations

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import KafkaProtocolError
from protocols.kafka.handlers.authorization import require_idempotent_write
from protocols.kafka.handlers.transactions import init_transactional_producer


async def handle_init_producer_id(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    if body.get("transactional_id") is not None:
        return await init_transactional_producer(ctx, header, body)
    try:
        require_idempotent_write(ctx)
    except KafkaProtocolError as exc:
        return {"throttle_time_ms": 0, "error_code": int(exc.code), "producer_id": -1,
                "producer_epoch": -1}
    producer_id = await ctx.topics.allocate_producer_id()
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id,
            "producer_epoch": 0}
