"""DescribeClientQuotas (48) and AlterClientQuotas (49), on the broker's quota store.

Authorisation as Kafka's KafkaApis: DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS
on the cluster to alter (CLUSTER_AUTHORIZATION_FAILED otherwise).  On a broker without a
quota store describe finds nothing and alter is refused with INVALID_REQUEST.  An entity or
key that protocols/kafka/client_quotas.py refuses (unknown type, an unenforced key such as
request_percentage) is that entry's INVALID_REQUEST; with validate_only nothing is stored.
The rules and the meters live in client_quotas.py and the gateway's quota store; this module
only translates.

This module must never keep quotas of its own.
"""

from __future__ import annotations

from typing import Any

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_ALTER_CONFIGS,
    OP_DESCRIBE_CONFIGS,
    RES_CLUSTER,
)
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.client_quotas import QuotaError, check_key, entity_of, matches
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode


def _store(ctx: RequestContext) -> Any:
    return getattr(ctx.broker, "quotas", None)


def _wire_entity(entity: Any) -> list[dict[str, Any]]:
    return [{"entity_type": t, "entity_name": n} for t, n in entity]


async def handle_describe_client_quotas(ctx: RequestContext, header: RequestHeader,
                                        body: dict) -> dict:
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                              "entries": []}
    if not ctx.authorize(OP_DESCRIBE_CONFIGS, RES_CLUSTER, CLUSTER_NAME):
        answer.update(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, entries=None,
                      error_message="not authorized to describe client quotas")
        return answer
    components = [(c["entity_type"], int(c["match_type"]), c.get("match"))
                  for c in body.get("components") or []]
    store = _store(ctx)
    table = store.table if store is not None else {}
    answer["entries"] = [
        {"entity": _wire_entity(entity),
         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
        for entity, values in table.items()
        if matches(entity, components, bool(body.get("strict")))
    ]
    return answer


async def handle_alter_client_quotas(ctx: RequestContext, header: RequestHeader,
                                     body: dict) -> dict:
    entries = body.get("entries") or []
    results: list[dict[str, Any]] = []
    changes = []
    allowed = ctx.authorize(OP_ALTER_CONFIGS, RES_CLUSTER, CLUSTER_NAME)
    store = _store(ctx)
    for entry in entries:
        wire_entity = [{"entity_type": e["entity_type"], "entity_name": e.get("entity_name")}
                       for e in entry.get("entity") or []]
        result: dict[str, Any] = {"error_code": 0, "error_message": None,
                                  "entity": wire_entity}
        results.append(result)
        if not allowed:
            result.update(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                          error_message="not authorized to alter client quotas")
            continue
        try:
            if store is None:
                raise QuotaError("this broker keeps no client quotas")
            entity = entity_of((e["entity_type"], e["entity_name"]) for e in wire_entity)
            ops: dict[str, float | None] = {}
            for op in entry.get("ops") or []:
                value = None if op.get("remove") else float(op["value"])
                check_key(op["key"], value)
                ops[op["key"]] = value
            changes.append((entity, ops))
        except QuotaError as exc:
            result.update(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc))
    if changes and not body.get("validate_only") and store is not None:
        await store.alter(changes)
    return {"throttle_time_ms": 0, "entries": results}
