"""Group configs (config resource type GROUP = 32) for DescribeConfigs and
(Incremental)AlterConfigs: the share-group configs of KIP-932 (share.record.lock.duration.ms,
share.delivery.count.limit, share.auto.offset.reset, share.isolation.level).

IncrementalAlterConfigs SETs or DELETEs them one by one; the legacy AlterConfigs replaces the
whole set.  Unknown names and bad values are INVALID_CONFIG.  Explicit values are reported as
DYNAMIC_GROUP_CONFIG, the rest as DEFAULT_CONFIG.  Authorisation (ALTER_CONFIGS /
DESCRIBE_CONFIGS on the group) is the caller's (handlers/configs.py).

This module must never store a config itself: the broker's share groups do.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.errors import InvalidConfigError, InvalidRequestError
from protocols.kafka.share_api import SHARE_GROUP_CONFIGS, ShareGroupsApi, validate_share_config

SOURCE_DYNAMIC_GROUP = 8
SOURCE_DEFAULT = 5
TYPE_STRING, TYPE_INT = 2, 3
OP_SET, OP_DELETE = 0, 1

_DOCS = {
    "share.record.lock.duration.ms": (TYPE_INT, "How long a share consumer holds a record."),
    "share.delivery.count.limit": (TYPE_INT, "Deliveries before a record is archived."),
    "share.auto.offset.reset": (TYPE_STRING, "Where a share group starts: earliest, latest "
                                "or by_duration:<ISO-8601 duration>."),
    "share.isolation.level": (TYPE_STRING, "read_committed skips aborted transactions."),
    "share.dead.letter.topic": (TYPE_STRING, "Where records that reach the delivery-count "
                                "limit are copied before they are archived (ledgerwire's own; "
                                "empty: none)."),
}


def _share_groups(ctx: RequestContext) -> ShareGroupsApi:
    share = getattr(ctx.broker, "share_groups", None)
    if share is None:
        raise InvalidRequestError("this broker serves no share groups")
    groups: ShareGroupsApi = share
    return groups


async def group_config_values(ctx: RequestContext,
                              group_id: str) -> list[tuple[str, str, int, int, str]]:
    """(name, value, source, type, documentation) of every group config, sorted by name."""
    explicit = await _share_groups(ctx).describe_configs(group_id)
    out = []
    for name in sorted(SHARE_GROUP_CONFIGS):
        kind, doc = _DOCS[name]
        if name in explicit:
            out.append((name, explicit[name], SOURCE_DYNAMIC_GROUP, kind, doc))
        else:
            out.append((name, SHARE_GROUP_CONFIGS[name][0], SOURCE_DEFAULT, kind, doc))
    return out


async def alter_group_configs(ctx: RequestContext, group_id: str, entries: list[dict[str, Any]],
                              *, incremental: bool, validate_only: bool) -> None:
    if not group_id:
        raise InvalidRequestError("group name can't be empty")
    names = Counter(e.get("name") for e in entries)
    duplicates = sorted(str(n) for n, c in names.items() if c > 1)
    if duplicates:
        raise InvalidRequestError(f"duplicate config keys: {duplicates}")
    share = _share_groups(ctx)
    changes: dict[str, str | None] = {}
    for e in entries:
        name = str(e.get("name"))
        op = int(e.get("config_operation", OP_SET)) if incremental else OP_SET
        if op not in (OP_SET, OP_DELETE):
            raise InvalidConfigError(f"operation {op} is not allowed for group config {name}")
        value = None if op == OP_DELETE else e.get("value")
        if op == OP_SET and value is None:
            raise InvalidConfigError(f"Null value not supported for group config {name}")
        changes[name] = value
    if not incremental:  # AlterConfigs: the given set replaces every explicit config
        for name in SHARE_GROUP_CONFIGS:
            changes.setdefault(name, None)
    for name, value in changes.items():
        validate_share_config(name, value)
    await share.alter_configs(group_id, changes, validate_only=validate_only)
