"""Metadata (key 3): brokers, cluster id and every requested topic's partitions.

In standalone this broker is the leader, the only replica and the whole ISR of every partition,
at leader epoch 0 (the ledger backend replicates underneath; Kafka-level replication is not
visible to clients).  In a cluster the broker list is every live broker and each partition's
leader (and only replica) is its owner from the ownership service; a partition with no live
owner yet is answered LEADER_NOT_AVAILABLE with leader -1, so clients ask again.

Requested topics that do not exist are created on the spot when the broker allows
auto-creation and the request does too (v4+ `allow_auto_topic_creation`, always for v0-v3),
with the broker's default partition count.

A topic given by id (v10+: a non-zero `topic_id`; Java 4.x sends the name as "" then, not
null) is looked up by id whatever the name says; an unknown id is UNKNOWN_TOPIC_ID.  Topics the
topic service calls internal (RocketMQ's schedule, transaction and retry topics) carry
`is_internal`, so tools hide them as they hide Kafka's own.

Authorisation: listing all topics shows only those the caller may DESCRIBE; a named topic it
may not describe gets TOPIC_AUTHORIZATION_FAILED, and so does an unknown one it may not create
(CREATE on the cluster or on the topic) when auto-creation would apply.  When asked
(v8+ include_topic_authorized_operations, v8-10 include_cluster_authorized_operations), each
topic and the cluster carry the caller's allowed operations, computed from the ACLs.

This module must never create a topic the request did not name.
"""

from __future__ import annotations

import logging
from typing import Any

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_CREATE,
    OP_DESCRIBE,
    RES_CLUSTER,
    RES_TOPIC,
)
from protocols.kafka.broker_api import RequestContext, ownership_of
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import (
    ErrorCode,
    InvalidTopicError,
    KafkaProtocolError,
    TopicAlreadyExistsError,
)
from protocols.kafka.handlers.authorization import (
    AUTHORIZED_OPERATIONS_OMITTED,
    cluster_authorized_operations,
    topic_authorized_operations,
)
from protocols.kafka.handlers.error_responses import ZERO_UUID, error_code_of
from protocols.kafka.handlers.topic_lookup import topic_by_id, validate_topic_name

log = logging.getLogger("ledgerwire.kafka.metadata")


def partition_entries(ctx: RequestContext, partitions: int, topic: str = "") -> list[dict]:
    me = ctx.broker.config.broker_id
    ownership = ownership_of(ctx.broker)
    if ownership is not None:
        entries = []
        for index in range(partitions):
            owner = ownership.owner_of(topic, index)
            leader = owner.node_id if owner is not None else -1
            entries.append({
                "error_code": 0 if owner is not None else ErrorCode.LEADER_NOT_AVAILABLE,
                "partition_index": index,
                "leader_id": leader,
                "leader_epoch": 0,
                "replica_nodes": [leader] if owner is not None else [],
                "isr_nodes": [leader] if owner is not None else [],
                "offline_replicas": [],
            })
        return entries
    return [
        {
            "error_code": 0,
            "partition_index": index,
            "leader_id": me,
            "leader_epoch": 0,
            "replica_nodes": [me],
            "isr_nodes": [me],
            "offline_replicas": [],
        }
        for index in range(partitions)
    ]


def is_internal(ctx: RequestContext, name: str) -> bool:
    """The topic service's word on whether `name` is a system topic (False if it has none)."""
    internal = getattr(ctx.topics, "is_internal", None)
    return bool(internal(name)) if internal is not None else False


def topic_entry(ctx: RequestContext, info: Any, with_operations: bool = False) -> dict:
    return {
        "error_code": 0,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": is_internal(ctx, info.name),
        "partitions": partition_entries(ctx, info.partitions, info.name),
        "topic_authorized_operations": (topic_authorized_operations(ctx, info.name)
                                        if with_operations else AUTHORIZED_OPERATIONS_OMITTED),
    }


def error_topic_entry(name: str | None, topic_id: Any, code: int) -> dict:
    return {
        "error_code": int(code),
        "name": name,
        "topic_id": topic_id if topic_id is not None else ZERO_UUID,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


async def _auto_create(ctx: RequestContext, name: str) -> int:
    """Create `name` with default settings; returns an error code (0 when it now exists)."""
    allowed = getattr(ctx.topics, "auto_create_allowed", None)  # a namespace may forbid it
    if allowed is not None and not allowed(name):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    try:
        validate_topic_name(name)
        await ctx.topics.create_topic(name, ctx.broker.config.default_partitions)
        log.info("auto-created topic", extra={"topic": name})
    except TopicAlreadyExistsError:
        pass  # created concurrently by another request: fine
    except InvalidTopicError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    except KafkaProtocolError as exc:
        return exc.code
    except Exception as exc:  # noqa: BLE001 - reported to the client as an error code
        return error_code_of(exc)
    return ErrorCode.NONE


async def handle_metadata(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    version = header.api_version
    config = ctx.broker.config
    requested = body.get("topics")
    all_topics = requested is None or (version == 0 and not requested)
    allow_auto_create = config.auto_create_topics and (
        version < 4 or bool(body.get("allow_auto_topic_creation", True))
    )
    with_ops = version >= 8 and bool(body.get("include_topic_authorized_operations"))
    topics_out: list[dict] = []
    if all_topics:
        for name, info in sorted(ctx.topics.topics().items()):
            if ctx.authorize(OP_DESCRIBE, RES_TOPIC, name):
                topics_out.append(topic_entry(ctx, info, with_ops))
    else:
        seen: set[str] = set()
        no_name = None if version >= 12 else ""  # the response's name is nullable from v12
        for item in requested or []:
            name = item.get("name")
            topic_id = item.get("topic_id")
            if name is None or (topic_id is not None and topic_id.int != 0):
                info = topic_by_id(ctx, topic_id)
                if info is None:
                    topics_out.append(error_topic_entry(no_name, topic_id,
                                                        ErrorCode.UNKNOWN_TOPIC_ID))
                elif not ctx.authorize(OP_DESCRIBE, RES_TOPIC, info.name):
                    topics_out.append(error_topic_entry(
                        no_name, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                else:
                    topics_out.append(topic_entry(ctx, info, with_ops))
                continue
            if name in seen:
                continue
            seen.add(name)
            if not ctx.authorize(OP_DESCRIBE, RES_TOPIC, name):
                topics_out.append(
                    error_topic_entry(name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            info = ctx.topics.topics().get(name)
            if info is None and allow_auto_create and not (
                    ctx.authorize(OP_CREATE, RES_CLUSTER, CLUSTER_NAME)
                    or ctx.authorize(OP_CREATE, RES_TOPIC, name)):
                topics_out.append(
                    error_topic_entry(name, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if info is None and allow_auto_create:
                code = await _auto_create(ctx, name)
                if code:
                    topics_out.append(error_topic_entry(name, None, code))
                    continue
                info = ctx.topics.topics().get(name)
            if info is None:
                topics_out.append(
                    error_topic_entry(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                )
            else:
                topics_out.append(topic_entry(ctx, info, with_ops))
    brokers = [
        {
            "node_id": config.broker_id,
            "host": ctx.broker.advertised_host,
            "port": ctx.broker.advertised_port,
            "rack": config.rack,
        }
    ]
    controller_id = config.broker_id
    ownership = ownership_of(ctx.broker)
    if ownership is not None:
        live = ownership.live_brokers()
        brokers = [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                   for b in live] or brokers
        controller_id = min(b.node_id for b in live) if live else controller_id
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": config.cluster_id,
        "controller_id": controller_id,
        "topics": topics_out,
        "cluster_authorized_operations": (
            cluster_authorized_operations(ctx)
            if 8 <= version <= 10 and body.get("include_cluster_authorized_operations")
            else AUTHORIZED_OPERATIONS_OMITTED),
    }
