"""FindCoordinator (key 10): this broker coordinates every group and transactional id.

In standalone (and until coordinator ownership exists) the answer is always this broker, for
both key types; clients ask early (kafka-python and librdkafka look the coordinator up before
they need it), so answering keeps them from looping on COORDINATOR_NOT_AVAILABLE.

This module must never keep group or transaction state: that belongs to the coordinators.
"""

from __future__ import annotations

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader


async def handle_find_coordinator(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    node_id = ctx.broker.config.broker_id
    host, port = ctx.broker.advertised_host, ctx.broker.advertised_port
    if header.api_version >= 4:
        return {
            "throttle_time_ms": 0,
            "coordinators": [
                {"key": key, "node_id": node_id, "host": host, "port": port,
                 "error_code": 0, "error_message": None}
                for key in body.get("coordinator_keys") or []
            ],
        }
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "node_id": node_id, "host": host, "port": port}
