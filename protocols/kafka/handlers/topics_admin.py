"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37).

Topics are created and changed through the topic service, synchronously: when the answer goes
out the topic exists (or is gone) in the metadata store, so `timeout_ms` never expires.  The
topics of one CreateTopics request are written concurrently (each one's checks, budget and
quota are taken in request order before the next topic's), so the store groups their writes
into few fsyncs (100k partitions at >= 1,000/s, issue 16).  The
replication factor is accepted as given (-1 or any positive value): the ledger backend does the
replicating, and Metadata shows this broker as the one replica.  Manual replica assignments are
accepted for their partition count only.  `validate_only` checks everything and changes nothing.

Authorisation: CREATE on the cluster or the topic, DELETE on the topic, ALTER on the topic for
CreatePartitions (TOPIC_AUTHORIZATION_FAILED per topic otherwise).  A created topic's partition
count and configs are shown only with DESCRIBE_CONFIGS on it (else topic_config_error_code says
TOPIC_AUTHORIZATION_FAILED), as Kafka's KafkaApis.  The partitions created or deleted count
against the client's controller_mutation_rate quota (handlers/mutation_quota.py), and one
request creates at most the broker's `max_partitions_per_request` partitions in all: the
topics (or partition increases) past that are refused with POLICY_VIOLATION, in request order.

This module must never touch partition data: it only asks the topic service.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import trio

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_ALTER,
    OP_CREATE,
    OP_DELETE,
    OP_DESCRIBE,
    OP_DESCRIBE_CONFIGS,
    RES_CLUSTER,
    RES_TOPIC,
)
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from protocols.kafka.handlers.configs import topic_config_values, validate_topic_configs
from protocols.kafka.handlers.error_responses import ZERO_UUID, error_code_of, error_message_of
from protocols.kafka.handlers.mutation_quota import admit_mutation
from protocols.kafka.handlers.topic_lookup import topic_by_id
from protocols.kafka.topic_names import validate_topic_name

REPLICATION_FACTOR_SHOWN = 1
# Each partition is a managed ledger with its own metadata: refuse absurd counts up front.
MAX_PARTITIONS_PER_TOPIC = 10_000


class _PartitionBudget:
    """What is left of one request's max_partitions_per_request."""

    def __init__(self, ctx: RequestContext) -> None:
        self.left = int(getattr(ctx.broker.config, "max_partitions_per_request", 10_000))

    def take(self, partitions: int) -> None:
        if partitions > self.left:
            raise PolicyViolationError(
                f"This request would create more than max_partitions_per_request "
                f"partitions ({self.left} left of the request's allowance, {partitions} asked)")
        self.left -= partitions


async def _create_one(ctx: RequestContext, header: RequestHeader, t: dict[str, Any],
                      validate_only: bool, budget: _PartitionBudget,
                      checked: Callable[[], None] = lambda: None) -> dict:
    """One topic of a CreateTopics request; `checked` is called when every check passed and
    the budget and quota are taken, just before the topic service writes."""
    name: str = t.get("name") or ""
    result: dict[str, Any] = {"name": name, "topic_id": ZERO_UUID, "error_code": 0,
                              "error_message": None, "topic_config_error_code": 0,
                              "num_partitions": -1, "replication_factor": -1, "configs": None}
    try:
        if not (ctx.authorize(OP_CREATE, RES_CLUSTER, CLUSTER_NAME)
                or ctx.authorize(OP_CREATE, RES_TOPIC, name)):
            raise TopicAuthorizationFailedError(f"not authorized to create topic {name}")
        validate_topic_name(name)
        assignments = t.get("assignments") or []
        partitions = int(t.get("num_partitions", -1))
        replication = int(t.get("replication_factor", -1))
        if assignments:
            if partitions != -1 or replication != -1:
                raise InvalidRequestError(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time."
                )
            indexes = sorted(int(a.get("partition_index", -1)) for a in assignments)
            if indexes != list(range(len(indexes))):
                raise InvalidReplicaAssignmentError("Partitions must be numbered 0..n-1")
            partitions = len(indexes)
        elif partitions == -1:
            partitions = ctx.broker.config.default_partitions
        if partitions <= 0:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        if partitions > MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(
                f"Number of partitions must be at most {MAX_PARTITIONS_PER_TOPIC}."
            )
        if replication == 0 or replication < -1:
            raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
        configs = validate_topic_configs(
            {c.get("name"): c.get("value") for c in t.get("configs") or []}
        )
        if name in ctx.topics.topics():
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        budget.take(partitions)
        if not validate_only:
            admit_mutation(ctx, header, partitions)
            checked()  # the service's own checks run before its first wait, too
            await ctx.topics.create_topic(name, partitions, configs or None)
            info = ctx.topics.topics().get(name)
            if info is not None:
                result["topic_id"] = info.topic_id
        if not ctx.authorize(OP_DESCRIBE_CONFIGS, RES_TOPIC, name):  # as Kafka: no configs
            result["topic_config_error_code"] = TopicAuthorizationFailedError.code
            return result
        result["num_partitions"] = partitions
        result["replication_factor"] = REPLICATION_FACTOR_SHOWN
        result["configs"] = [
            {"name": n, "value": v, "read_only": False, "config_source": s,
             "is_sensitive": False}
            for n, v, s, _kind, _doc in topic_config_values(configs, ctx.broker.config)
        ]
    except Exception as exc:  # noqa: BLE001 - becomes this topic's error code
        result.update(error_code=error_code_of(exc), error_message=error_message_of(exc),
                      num_partitions=-1, replication_factor=-1, configs=None)
    return result


async def handle_create_topics(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    requested = body.get("topics") or []
    counts = Counter(t.get("name") for t in requested)
    validate_only = bool(body.get("validate_only", False))
    out: list[dict | None] = []
    budget = _PartitionBudget(ctx)
    reported_duplicates: set[str] = set()

    async def create(slot: int, t: dict[str, Any],
                     task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        started = False

        def checked() -> None:
            nonlocal started
            started = True
            task_status.started()

        try:
            out[slot] = await _create_one(ctx, header, t, validate_only, budget, checked)
        finally:
            if not started:
                task_status.started()

    async with trio.open_nursery() as nursery:  # the topics' metadata writes share fsyncs
        for t in requested:
            name = t.get("name")
            if counts[name] > 1:
                if name in reported_duplicates:
                    continue
                reported_duplicates.add(name)
                out.append({"name": name, "topic_id": ZERO_UUID,
                            "error_code": InvalidRequestError.code,
                            "error_message": f"Create topics request from client contains "
                                             f"multiple entries for topic {name}",
                            "num_partitions": -1, "replication_factor": -1, "configs": None})
                continue
            out.append(None)
            await nursery.start(create, len(out) - 1, t)  # checked in request order
    return {"throttle_time_ms": 0, "topics": out}


async def _delete_one(ctx: RequestContext, header: RequestHeader, name: str | None,
                      topic_id: Any) -> dict:
    result: dict[str, Any] = {"name": name, "topic_id": topic_id or ZERO_UUID, "error_code": 0,
                              "error_message": None}
    try:
        if name is None:
            info = topic_by_id(ctx, topic_id)
            if info is None:
                raise UnknownTopicIdError(f"Topic id {topic_id} does not exist")
            name = info.name
            result["name"] = name
        else:
            if not ctx.authorize(OP_DESCRIBE, RES_TOPIC, name):  # before existence: no leak
                raise TopicAuthorizationFailedError(f"not authorized to delete topic {name}")
            info = ctx.topics.topics().get(name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"Topic {name} does not exist")
            result["topic_id"] = info.topic_id
        if not ctx.authorize(OP_DELETE, RES_TOPIC, name):
            raise TopicAuthorizationFailedError(f"not authorized to delete topic {name}")
        admit_mutation(ctx, header, info.partitions)
        await ctx.topics.delete_topic(name)
    except Exception as exc:  # noqa: BLE001 - becomes this topic's error code
        result.update(error_code=error_code_of(exc), error_message=error_message_of(exc))
    return result


async def handle_delete_topics(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    if header.api_version >= 6:
        items = [(t.get("name"), t.get("topic_id")) for t in body.get("topics") or []]
    else:
        items = [(n, None) for n in body.get("topic_names") or []]
    return {"throttle_time_ms": 0,
            "responses": [await _delete_one(ctx, header, n, i) for n, i in items]}


async def _grow_one(ctx: RequestContext, header: RequestHeader, t: dict[str, Any],
                    validate_only: bool, budget: _PartitionBudget) -> dict:
    name: str = t.get("name") or ""
    result: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
    try:
        if not ctx.authorize(OP_ALTER, RES_TOPIC, name):
            raise TopicAuthorizationFailedError(f"not authorized to alter topic {name}")
        info = ctx.topics.topics().get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        count = int(t.get("count", 0))
        if count < info.partitions:
            raise InvalidPartitionsError(
                f"Topic currently has {info.partitions} partitions, which is higher than "
                f"the requested {count}."
            )
        if count == info.partitions:
            raise InvalidPartitionsError(f"Topic already has {info.partitions} partitions.")
        if count > MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(
                f"Number of partitions must be at most {MAX_PARTITIONS_PER_TOPIC}."
            )
        assignments = t.get("assignments")
        if assignments is not None and len(assignments) != count - info.partitions:
            raise InvalidReplicaAssignmentError(
                f"Increasing the number of partitions by {count - info.partitions} but "
                f"{len(assignments)} assignments provided."
            )
        budget.take(count - info.partitions)
        if not validate_only:
            admit_mutation(ctx, header, count - info.partitions)
            await ctx.topics.create_partitions(name, count)
    except Exception as exc:  # noqa: BLE001 - becomes this topic's error code
        result.update(error_code=error_code_of(exc), error_message=error_message_of(exc))
    return result


async def handle_create_partitions(ctx: RequestContext, header: RequestHeader,
                                   body: dict) -> dict:
    validate_only = bool(body.get("validate_only", False))
    budget = _PartitionBudget(ctx)
    return {"throttle_time_ms": 0,
            "results": [await _grow_one(ctx, header, t, validate_only, budget)
                        for t in body.get("topics") or []]}
