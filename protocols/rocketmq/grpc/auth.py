"""Who makes a RocketMQ 5 call, and what it needs: the 4.x door's model, on gRPC metadata.

A 5.x client signs each call with its account's keys in the `authorization` metadata:

    MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>

where the signature is HMAC-SHA1 over the `x-mq-date-time` value with the secret key.  A valid
signature makes the caller `User:<access key>`, the principal the 4.x door and Kafka's ACLs
use; no signature is `User:ANONYMOUS`, refused when the broker is secured unless anonymous
access is configured (the same `RocketMQGuard` decides both doors).  Each RPC is then mapped to
the Kafka operations it needs (`needs_*` below) and the guard's authorizer decides:

    QueryRoute            DESCRIBE topic (CREATE on the cluster or topic when it is new)
    SendMessage           WRITE topic;  EndTransaction WRITE topic
    ReceiveMessage, Ack, ChangeInvisibleDuration, ForwardToDLQ, UpdateOffset
                          READ topic and READ group (a %RETRY%/%DLQ% topic counts as its group)
    QueryAssignment       DESCRIBE topic, READ group;  Heartbeat READ group
    GetOffset             DESCRIBE topic and group;  QueryOffset DESCRIBE topic

This module never does I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_CREATE,
    OP_DESCRIBE,
    OP_READ,
    OP_WRITE,
    RES_CLUSTER,
    RES_GROUP,
    RES_TOPIC,
)
from protocols.rocketmq.access import ANONYMOUS, Need, RocketMQGuard
from protocols.rocketmq.grpc.errors import RpcFailure
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.topic_names import DLQ_PREFIX, RETRY_PREFIX

SCHEME = "MQv2-HMAC-SHA1"
DATE_HEADER = "x-mq-date-time"


def parse_authorization(value: str) -> tuple[str, str]:
    """(access key, signature) of an `authorization` value; RpcFailure when malformed."""
    scheme, _, rest = value.strip().partition(" ")
    if scheme != SCHEME:
        raise RpcFailure(pb.UNAUTHORIZED, f"unsupported authorization scheme {scheme!r}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, _, field_value = part.strip().partition("=")
        fields[name] = field_value.strip()
    if not fields.get("Credential") or not fields.get("Signature"):
        raise RpcFailure(pb.UNAUTHORIZED, "authorization lacks Credential or Signature")
    if fields.get("SignedHeaders", DATE_HEADER) != DATE_HEADER:
        raise RpcFailure(pb.UNAUTHORIZED, "only x-mq-date-time may be signed")
    return fields["Credential"], fields["Signature"]


def signature(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def principal_of(metadata: dict[str, str], conn: Any, guard: RocketMQGuard | None) -> str:
    """The caller's principal; RpcFailure(UNAUTHORIZED) when it proves nobody it may be."""
    value = metadata.get("authorization", "")
    if guard is None:
        return ANONYMOUS  # an open broker: there is nothing to check a signature against
    accounts = guard.accounts
    if accounts is not None and accounts.globally_white(conn):
        return ANONYMOUS
    if not value:
        if guard.require_signature and not guard.allow_anonymous:
            raise RpcFailure(pb.UNAUTHORIZED, "this broker requires signed requests")
        return ANONYMOUS
    access_key, given = parse_authorization(value)
    account = accounts.accounts.get(access_key) if accounts is not None else None
    if account is None:
        raise RpcFailure(pb.UNAUTHORIZED, f"no account for access key {access_key}")
    expected = signature(account.secret_key, metadata.get(DATE_HEADER, ""))
    if not hmac.compare_digest(expected.lower(), given.lower()):
        raise RpcFailure(pb.UNAUTHORIZED, f"signature check failed for {access_key}")
    return f"User:{access_key}"


def _storage(topic: str) -> str:
    return topic.replace("%", ".")


def topic_need(topic: str, operation: int) -> Need:
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return Need(OP_READ, RES_GROUP, topic[len(prefix):])
    return Need(operation, RES_TOPIC, _storage(topic))


def group_need(group: str, operation: int) -> Need:
    return Need(operation, RES_GROUP, group)


def create_need(topic: str) -> Need:
    return Need(OP_CREATE, RES_CLUSTER, CLUSTER_NAME, Need(OP_CREATE, RES_TOPIC, _storage(topic)))


def needs_consume(topic: str, group: str) -> list[Need]:
    return [topic_need(topic, OP_READ), group_need(group, OP_READ)]


def needs_write(topic: str) -> list[Need]:
    return [topic_need(topic, OP_WRITE)]


def needs_describe(topic: str) -> list[Need]:
    return [topic_need(topic, OP_DESCRIBE)]


def needs_telemetry(settings: pb.Settings) -> list[Need]:
    """A Telemetry session's settings register its client as a producer of the topics it
    publishes to (which then receives their transaction check-backs, half messages included)
    or as a consumer of its group: what sending to those topics or consuming needs."""
    which = settings.WhichOneof("pub_sub")
    if which == "publishing":
        return [topic_need(topic.name, OP_WRITE) for topic in settings.publishing.topics]
    if which == "subscription":
        sub = settings.subscription
        group = [group_need(sub.group.name, OP_READ)] if sub.group.name else []
        return group + [topic_need(s.topic.name, OP_READ) for s in sub.subscriptions]
    return []
