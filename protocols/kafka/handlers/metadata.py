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

Listing speed (issue 16: 100,000 partitions listed in a second): each topic's entry is kept
encoded per topic (`_EntryCache`, one per topic service) for the version last asked, keyed by
what it is made of (id, partition count, internal flag, leaders), so a listing encodes only
topics that changed; entries of topics gone are dropped when the cache outgrows the catalogue.
Entries with authorized operations are never cached (they depend on the caller).

This module must never create a topic the request did not name.
"""

from __future__ import annotations

import logging
import struct
import weakref
from typing import Any

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_CREATE,
    OP_DESCRIBE,
    RES_CLUSTER,
    RES_TOPIC,
)
from protocols.kafka.broker_api import RequestContext, ownership_of
from protocols.kafka.codec import RequestHeader, encode_response_element
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
from protocols.kafka.handlers.error_responses import ZERO_UUID, ApiKey, error_code_of
from protocols.kafka.handlers.topic_lookup import topic_by_id
from protocols.kafka.schema_compiler import PreEncoded
from protocols.kafka.topic_names import validate_topic_name

log = logging.getLogger("ledgerwire.kafka.metadata")


def _leaders(ctx: RequestContext, topic: str, partitions: int,
             table: list[int] | None) -> tuple[int, ...] | None:
    """Each partition's leader (-1: no live owner), None in standalone (this broker leads)."""
    ownership = ownership_of(ctx.broker)
    if ownership is None:
        return None
    if table is not None:
        return ownership.partition_leaders(topic, partitions, table)  # type: ignore[attr-defined]
    return tuple(owner.node_id if (owner := ownership.owner_of(topic, i)) is not None else -1
                 for i in range(partitions))


def _leader_table(ctx: RequestContext) -> list[int] | None:
    """The ownership's bundle -> leader table for this request, when it offers one."""
    ownership = ownership_of(ctx.broker)
    table = getattr(ownership, "leader_table", None)
    return table() if table is not None else None


_PARTITION_TEMPLATES: dict[tuple[int, int, bool], tuple[bytes, bytes]] = {}


def _partition_template(version: int, leader: int, standalone: bool) -> tuple[bytes, bytes]:
    """The encoded partition entry of `leader` around its 4-byte index (error code first)."""
    key = (version, leader, standalone)
    template = _PARTITION_TEMPLATES.get(key)
    if template is None:
        led = standalone or leader >= 0
        encoded = encode_response_element(ApiKey.METADATA, version, ("topics", "partitions"), {
            "error_code": 0 if led else ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": 0,
            "leader_id": leader, "leader_epoch": 0, "replica_nodes": [leader] if led else [],
            "isr_nodes": [leader] if led else [], "offline_replicas": []})
        template = _PARTITION_TEMPLATES[key] = (encoded[:2], encoded[6:])
    return template


_INDEX = struct.Struct(">i").pack


def _entries_for(version: int, me: int, partitions: int,
                 leaders: tuple[int, ...] | None) -> list[PreEncoded]:
    """Every partition's entry, encoded: a template per leader with the index put in."""
    if leaders is None:
        head, tail = _partition_template(version, me, True)
        return [PreEncoded(head + _INDEX(index) + tail) for index in range(partitions)]
    entries = []
    for index, leader in enumerate(leaders):
        head, tail = _partition_template(version, leader, False)
        entries.append(PreEncoded(head + _INDEX(index) + tail))
    return entries


class _EntryCache:
    """Encoded Metadata topic entries of one topic service: name -> (key, bytes)."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[tuple, bytes]] = {}

    def entry(self, ctx: RequestContext, version: int, info: Any,
              table: list[int] | None) -> Any:
        leaders = _leaders(ctx, info.name, info.partitions, table)
        internal = is_internal(ctx, info.name)
        key = (version, info.topic_id, info.partitions, internal, leaders)
        cached = self.entries.get(info.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        encoded = encode_response_element(ApiKey.METADATA, version, ("topics",), {
            "error_code": 0, "name": info.name, "topic_id": info.topic_id,
            "is_internal": internal,
            "partitions": _entries_for(version, ctx.broker.config.broker_id, info.partitions,
                                       leaders),
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
        self.entries[info.name] = (key, encoded)
        return encoded

    def prune(self, names: Any) -> None:
        for name in [n for n in self.entries if n not in names]:
            del self.entries[name]


_CACHES: weakref.WeakKeyDictionary[Any, _EntryCache] = weakref.WeakKeyDictionary()


def _entry_cache(ctx: RequestContext) -> _EntryCache | None:
    try:
        cache = _CACHES.get(ctx.topics)
        if cache is None:
            cache = _CACHES[ctx.topics] = _EntryCache()
    except TypeError:  # a topic service that cannot be weakly referenced: no cache
        return None
    return cache


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


def topic_entry(ctx: RequestContext, info: Any, with_operations: bool = False,
                version: int | None = None, table: list[int] | None = None) -> Any:
    """The topic's Metadata entry: cached encoded bytes when `version` is given and no
    authorized operations are asked for, else a dict."""
    if version is not None and not with_operations:
        cache = _entry_cache(ctx)
        if cache is not None:
            return cache.entry(ctx, version, info, table)
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
    table = _leader_table(ctx)
    if all_topics:
        catalogue = ctx.topics.topics()
        open_to_all = getattr(ctx.broker, "authorizer", None) is None
        for name, info in sorted(catalogue.items()):
            if open_to_all or ctx.authorize(OP_DESCRIBE, RES_TOPIC, name):
                topics_out.append(topic_entry(ctx, info, with_ops, version, table))
        cache = _entry_cache(ctx)
        if cache is not None and len(cache.entries) > len(catalogue) + 1000:
            cache.prune(catalogue)
    else:
        seen: set[str] = set()
        asked: list[str] = []
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
                    topics_out.append(topic_entry(ctx, info, with_ops, version, table))
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
                topics_out.append(topic_entry(ctx, info, with_ops, version, table))
                asked.append(name)
        asked_by = ownership_of(ctx.broker)
        if asked_by is not None and asked:
            asked_by.note_asked(asked)  # topics that exist only: a made-up name is not kept
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
        live = ownership.live_brokers()  # (a broker that just left is listed, not controller)
        brokers = [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                   for b in ownership.listed_brokers()] or brokers
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
