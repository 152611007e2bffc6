"""Authorisation checks for handlers, as one-liners over `RequestContext.authorize`.

`require_*` raise the Kafka authorisation error (TOPIC_ / GROUP_ / CLUSTER_AUTHORIZATION_FAILED)
for handlers whose answer has one error field for the whole request (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, FindCoordinator, OffsetDelete's group check); the broker turns the
exception into that answer.  `*_denied_code` return the code (0 when allowed) for handlers that
report errors per item (OffsetCommit/OffsetFetch partitions, DescribeGroups/DeleteGroups
groups, Fetch/ListOffsets partitions).  Operation and resource codes are acl_model's.

This module must never decide anything itself: `ctx.authorize` (the broker's authorizer) does.
"""

from __future__ import annotations

from protocols.kafka.acl_model import CLUSTER_NAME, RES_CLUSTER, RES_GROUP, RES_TOPIC
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)


def require_group(ctx: RequestContext, operation: int, group_id: str) -> None:
    if not ctx.authorize(operation, RES_GROUP, group_id):
        raise GroupAuthorizationFailedError(f"not authorized to access group {group_id}")


def require_topic(ctx: RequestContext, operation: int, topic: str) -> None:
    if not ctx.authorize(operation, RES_TOPIC, topic):
        raise TopicAuthorizationFailedError(f"not authorized to access topic {topic}")


def require_cluster(ctx: RequestContext, operation: int) -> None:
    if not ctx.authorize(operation, RES_CLUSTER, CLUSTER_NAME):
        raise ClusterAuthorizationFailedError("not authorized to access the cluster")


def group_denied_code(ctx: RequestContext, operation: int, group_id: str) -> int:
    """0 when allowed, else GROUP_AUTHORIZATION_FAILED."""
    if ctx.authorize(operation, RES_GROUP, group_id):
        return 0
    return int(ErrorCode.GROUP_AUTHORIZATION_FAILED)


def topic_denied_code(ctx: RequestContext, operation: int, topic: str) -> int:
    """0 when allowed, else TOPIC_AUTHORIZATION_FAILED."""
    if ctx.authorize(operation, RES_TOPIC, topic):
        return 0
    return int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
