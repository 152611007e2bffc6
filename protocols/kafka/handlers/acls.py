"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31) on the broker's ACL store.

The store is `broker.authorizer.acls` (gateway/security/acl_store.py: one CAS-updated node in the
metadata store, cached in memory).  A broker without an authorizer answers SECURITY_DISABLED,
as Kafka does without an authorizer.  Describing ACLs needs DESCRIBE on the cluster; creating
and deleting them needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise).
Malformed bindings and filters get INVALID_REQUEST per item.  v0 requests carry no pattern
type: the schema default (LITERAL) applies.

This module must never change ACLs other than through the store.
"""

from __future__ import annotations

from typing import Any

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_ALTER,
    OP_DESCRIBE,
    PAT_LITERAL,
    RES_CLUSTER,
    AclBinding,
    AclError,
    AclFilter,
)
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers.error_responses import error_code_of, error_message_of


def _store(ctx: RequestContext) -> Any:
    authorizer = getattr(ctx.broker, "authorizer", None)
    return None if authorizer is None else authorizer.acls


def _filter(item: dict, prefix: str) -> AclFilter:
    return AclFilter(
        resource_type=int(item.get(f"resource_type{prefix}", 0)),
        resource_name=item.get(f"resource_name{prefix}"),
        pattern_type=int(item.get(f"pattern_type{prefix}", PAT_LITERAL)),
        principal=item.get(f"principal{prefix}"),
        host=item.get(f"host{prefix}"),
        operation=int(item.get("operation", 0)),
        permission=int(item.get("permission_type", 0)),
    )


def _refusal(ctx: RequestContext, operation: int) -> tuple[int, str] | None:
    if _store(ctx) is None:
        return ErrorCode.SECURITY_DISABLED, "no authorizer is configured on this broker"
    if not ctx.authorize(operation, RES_CLUSTER, CLUSTER_NAME):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized to manage ACLs"
    return None


async def handle_describe_acls(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    out: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                           "resources": []}
    refused = _refusal(ctx, OP_DESCRIBE)
    if refused is not None:
        out["error_code"], out["error_message"] = int(refused[0]), refused[1]
        return out
    acl_filter = _filter(body, "_filter")
    try:
        acl_filter.validate()
    except AclError as exc:
        out["error_code"], out["error_message"] = int(ErrorCode.INVALID_REQUEST), str(exc)
        return out
    grouped: dict[tuple[int, str, int], list[dict]] = {}
    for acl in _store(ctx).describe(acl_filter):
        grouped.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
            {"principal": acl.principal, "host": acl.host, "operation": acl.operation,
             "permission_type": acl.permission})
    out["resources"] = [
        {"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": acls}
        for (rt, name, pt), acls in sorted(grouped.items())
    ]
    return out


async def handle_create_acls(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    creations = body.get("creations") or []
    refused = _refusal(ctx, OP_ALTER)
    if refused is not None:
        return {"throttle_time_ms": 0, "results": [
            {"error_code": int(refused[0]), "error_message": refused[1]} for _ in creations]}
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for c in creations:
        binding = AclBinding(
            resource_type=int(c.get("resource_type", 0)),
            resource_name=c.get("resource_name") or "",
            pattern_type=int(c.get("resource_pattern_type", PAT_LITERAL)),
            principal=c.get("principal") or "",
            host=c.get("host") or "",
            operation=int(c.get("operation", 0)),
            permission=int(c.get("permission_type", 0)),
        )
        try:
            binding.validate()
        except AclError as exc:
            results.append({"error_code": int(ErrorCode.INVALID_REQUEST),
                            "error_message": str(exc)})
            continue
        valid.append(binding)
        results.append({"error_code": 0, "error_message": None})
    if valid:
        try:
            await _store(ctx).create(valid)
        except Exception as exc:  # noqa: BLE001 - every creation of this request failed
            code, message = error_code_of(exc), error_message_of(exc)
            for r in results:
                if r["error_code"] == 0:
                    r.update(error_code=int(code), error_message=message)
    return {"throttle_time_ms": 0, "results": results}


def _matching_row(acl: AclBinding) -> dict:
    return {"error_code": 0, "error_message": None, "resource_type": acl.resource_type,
            "resource_name": acl.resource_name, "pattern_type": acl.pattern_type,
            "principal": acl.principal, "host": acl.host, "operation": acl.operation,
            "permission_type": acl.permission}


async def handle_delete_acls(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    raw_filters = body.get("filters") or []
    refused = _refusal(ctx, OP_ALTER)
    if refused is not None:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": int(refused[0]), "error_message": refused[1], "matching_acls": []}
            for _ in raw_filters]}
    results: list[dict[str, Any]] = []
    usable: list[tuple[int, AclFilter]] = []
    for i, item in enumerate(raw_filters):
        acl_filter = _filter(item, "_filter")
        try:
            acl_filter.validate()
        except AclError as exc:
            results.append({"error_code": int(ErrorCode.INVALID_REQUEST),
                            "error_message": str(exc), "matching_acls": []})
            continue
        usable.append((i, acl_filter))
        results.append({"error_code": 0, "error_message": None, "matching_acls": []})
    if usable:
        try:
            matched = await _store(ctx).delete([f for _i, f in usable])
        except Exception as exc:  # noqa: BLE001 - every filter of this request failed
            code, message = error_code_of(exc), error_message_of(exc)
            for i, _f in usable:
                results[i].update(error_code=int(code), error_message=message)
        else:
            for (i, _f), acls in zip(usable, matched, strict=True):
                results[i]["matching_acls"] = [_matching_row(a) for a in acls]
    return {"throttle_time_ms": 0, "filter_results": results}
