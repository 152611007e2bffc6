"""Authorisation checks for handlers, as one-liners over `RequestContext.authorize`.

`require_*` raise the Kafka authorisation error (TOPIC_ / GROUP_ / CLUSTER_AUTHORIZATION_FAILED)
for handlers whose answer has one error field for the whole request (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, FindCoordinator, OffsetDelete's group check); the broker turns the
exception into that answer.  `*_denied_code` return the code (0 when allowed) for handlers that
report errors per item (OffsetCommit/OffsetFetch partitions, DescribeGroups/DeleteGroups
groups, Fetch/ListOffsets partitions).  Operation and resource codes are acl_model's.

`cluster_authorized_operations` / `topic_authorized_operations` are Kafka's "authorized
operations" bit fields (bit n set when operation n is allowed) that Metadata, DescribeCluster
and DescribeTopics report on request; AUTHORIZED_OPERATIONS_OMITTED when not asked for.

This module must never decide anything itself: `ctx.authorize` (the broker's authorizer) does.
"""

from __future__ import annotations

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_ALTER,
    OP_ALTER_CONFIGS,
    OP_CLUSTER_ACTION,
    OP_CREATE,
    OP_DELETE,
    OP_DESCRIBE,
    OP_DESCRIBE_CONFIGS,
    OP_IDEMPOTENT_WRITE,
    OP_READ,
    OP_WRITE,
    RES_CLUSTER,
    RES_GROUP,
    RES_TOPIC,
    RES_TRANSACTIONAL_ID,
)
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)

AUTHORIZED_OPERATIONS_OMITTED = -2147483648
# The operations Kafka reports per resource type (its AclEntry.supportedOperations).
CLUSTER_OPERATIONS = (OP_CREATE, OP_ALTER, OP_DESCRIBE, OP_CLUSTER_ACTION, OP_DESCRIBE_CONFIGS,
                      OP_ALTER_CONFIGS, OP_IDEMPOTENT_WRITE)
TOPIC_OPERATIONS = (OP_READ, OP_WRITE, OP_CREATE, OP_DELETE, OP_ALTER, OP_DESCRIBE,
                    OP_DESCRIBE_CONFIGS, OP_ALTER_CONFIGS)


def _operation_bits(ctx: RequestContext, operations: tuple[int, ...], resource_type: int,
                    name: str) -> int:
    bits = 0
    for op in operations:
        if ctx.authorize(op, resource_type, name):
            bits |= 1 << op
    return bits


def cluster_authorized_operations(ctx: RequestContext) -> int:
    """The cluster operations the caller is allowed, as Kafka's bit field."""
    return _operation_bits(ctx, CLUSTER_OPERATIONS, RES_CLUSTER, CLUSTER_NAME)


def topic_authorized_operations(ctx: RequestContext, topic: str) -> int:
    """The operations the caller is allowed on `topic`, as Kafka's bit field."""
    return _operation_bits(ctx, TOPIC_OPERATIONS, RES_TOPIC, topic)


def require_group(ctx: RequestContext, operation: int, group_id: str) -> None:
    if not ctx.authorize(operation, RES_GROUP, group_id):
        raise GroupAuthorizationFailedError(f"not authorized to access group {group_id}")


def require_topic(ctx: RequestContext, operation: int, topic: str) -> None:
    if not ctx.authorize(operation, RES_TOPIC, topic):
        raise TopicAuthorizationFailedError(f"not authorized to access topic {topic}")


def require_cluster(ctx: RequestContext, operation: int) -> None:
    if not ctx.authorize(operation, RES_CLUSTER, CLUSTER_NAME):
        raise ClusterAuthorizationFailedError("not authorized to access the cluster")


def require_transactional_id(ctx: RequestContext, operation: int, transactional_id: str) -> None:
    if not ctx.authorize(operation, RES_TRANSACTIONAL_ID, transactional_id):
        raise TransactionalIdAuthorizationFailedError(
            f"not authorized to use transactional id {transactional_id}")


def require_idempotent_write(ctx: RequestContext) -> None:
    """An idempotent producer id: IDEMPOTENT_WRITE on the cluster, or (KIP-679, Kafka 3.0)
    WRITE on any topic, which the authorizer answers for the wildcard topic name."""
    if ctx.authorize(OP_IDEMPOTENT_WRITE, RES_CLUSTER, CLUSTER_NAME):
        return
    if ctx.authorize_any(OP_WRITE, RES_TOPIC):
        return
    raise ClusterAuthorizationFailedError("not authorized to write idempotently")


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
