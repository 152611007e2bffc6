"""protocols/rocketmq/access.py without a server: every broker request code has a rule, codes
without one fail closed, and the mapping to Kafka operations (auto-create, half messages,
retry topics, message ids) is the documented one.  Decisions by acl_model's real rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from protocols.kafka import acl_model as m
from protocols.rocketmq.access import ANONYMOUS, RULES, Need, RocketMQGuard, required
from protocols.rocketmq.acl import AclRefusedError, PlainAclValidator, sign_request
from protocols.rocketmq.codec import make_request
from protocols.rocketmq.dispatch import BROKER_HANDLERS, LISTING_HANDLERS
from protocols.rocketmq.message_encoding import SYS_FLAG_TRANSACTION_PREPARED
from protocols.rocketmq.message_id import commit_log_offset
from protocols.rocketmq.request_codes import RequestCode as RC

AK, SK = "Account01", "Secret0001"


@dataclass
class Acls:
    bindings: list[m.AclBinding] = field(default_factory=list)

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool:
        return m.decide(self.bindings, principal, host, operation, resource_type, name,
                        allow_if_no_acl=False)

    def allow(self, rt: int, name: str, op: int, principal: str = f"User:{AK}") -> None:
        self.bindings.append(m.AclBinding(rt, name, m.PAT_LITERAL, principal, "*", op,
                                          m.PERM_ALLOW))


@dataclass
class Topics:
    names: dict[str, Any] = field(default_factory=lambda: {"orders": None, "my.dotted": None})

    def topics(self) -> dict[str, Any]:
        return self.names


@dataclass
class Broker:
    topics: Topics = field(default_factory=Topics)


class Conn:
    peer = ("10.0.0.1", 5555)


def guard(acls: Acls, **kw: Any) -> RocketMQGuard:
    accounts = PlainAclValidator.from_config([{"access_key": AK, "secret_key": SK}])
    return RocketMQGuard(accounts=accounts, authorizer=acls, require_signature=True, **kw)


def request(code: int, ext: dict[str, object], body: bytes = b"", *, sign: bool = True) -> Any:
    fields = {k: str(v) for k, v in ext.items()}
    if sign:
        sign_request(fields, body, AK, SK)
    return make_request(code, dict(fields), body)


def test_every_broker_request_code_has_a_rule() -> None:
    handled = set(BROKER_HANDLERS) | set(LISTING_HANDLERS)
    assert handled <= set(RULES), sorted(handled - set(RULES))
    unknown = required(make_request(9999, {}), Topics())
    assert unknown == [Need(m.OP_ALTER, m.RES_CLUSTER, m.CLUSTER_NAME)]


def test_send_needs_write_create_when_new_and_the_transactional_id_for_a_half() -> None:
    send = {"producerGroup": "pg", "topic": "orders", "sysFlag": 0}
    assert required(request(RC.SEND_MESSAGE, send), Topics()) == [
        Need(m.OP_WRITE, m.RES_TOPIC, "orders")]
    new = required(request(RC.SEND_MESSAGE, {**send, "topic": "fresh"}), Topics())
    assert new[1].operation == m.OP_CREATE and new[1].or_else == Need(
        m.OP_CREATE, m.RES_TOPIC, "fresh")
    half = {"a": "pg", "b": "my%dotted", "f": SYS_FLAG_TRANSACTION_PREPARED}
    assert required(request(RC.SEND_MESSAGE_V2, half), Topics()) == [
        Need(m.OP_WRITE, m.RES_TOPIC, "my.dotted"),
        Need(m.OP_WRITE, m.RES_TRANSACTIONAL_ID, "pg")]
    retry = required(request(RC.SEND_MESSAGE, {**send, "topic": "%RETRY%cg"}), Topics())
    assert retry == [Need(m.OP_READ, m.RES_GROUP, "cg")]


def test_view_by_id_needs_read_on_the_topic_its_hash_names() -> None:
    offset = commit_log_offset("orders", 0, 7)
    assert required(request(RC.VIEW_MESSAGE_BY_ID, {"offset": offset}), Topics()) == [
        Need(m.OP_READ, m.RES_TOPIC, "orders")]


def test_send_back_needs_read_on_the_topic_its_offset_names() -> None:
    # The handler copies the message at `offset` into the group's retry topic, which the
    # group reads: naming a readable originTopic (or none) must not reach another topic.
    secret = commit_log_offset("secret", 0, 0)
    topics = Topics({"orders": None, "secret": None, ".RETRY.cg": None})
    for origin in ({}, {"originTopic": "orders"}):
        needs = required(request(RC.CONSUMER_SEND_MSG_BACK,
                                 {"group": "cg", "offset": secret, **origin}), topics)
        assert Need(m.OP_READ, m.RES_TOPIC, "secret") in needs, needs
    acls = Acls()
    acls.allow(m.RES_GROUP, "cg", m.OP_READ)
    acls.allow(m.RES_TOPIC, "orders", m.OP_READ)
    back = {"group": "cg", "originTopic": "orders", "offset": secret, "delayLevel": -1}
    with pytest.raises(AclRefusedError, match="READ on topic secret"):
        guard(acls).check(Conn(), request(RC.CONSUMER_SEND_MSG_BACK, back), Broker(topics))
    # a message of the topic it reads, and one re-consumed from its own retry topic, go back
    for offset in (commit_log_offset("orders", 1, 5), commit_log_offset("%RETRY%cg", 0, 3)):
        guard(acls).check(Conn(), request(RC.CONSUMER_SEND_MSG_BACK, {**back, "offset": offset}),
                          Broker(topics))


def test_guard_decides_with_the_kafka_acls() -> None:
    acls = Acls()
    g = guard(acls)
    pull = {"consumerGroup": "cg", "topic": "orders", "queueId": 0}
    with pytest.raises(AclRefusedError, match="READ on topic orders"):
        g.check(Conn(), request(RC.PULL_MESSAGE, pull), Broker())
    acls.allow(m.RES_TOPIC, "orders", m.OP_READ)
    with pytest.raises(AclRefusedError, match="READ on group cg"):
        g.check(Conn(), request(RC.PULL_MESSAGE, pull), Broker())
    acls.allow(m.RES_GROUP, "cg", m.OP_READ)
    assert g.check(Conn(), request(RC.PULL_MESSAGE, pull), Broker()) == f"User:{AK}"
    # the topic's CREATE alternative: on the cluster, or on the topic itself
    create = {"topic": "fresh", "readQueueNums": 4, "writeQueueNums": 4}
    with pytest.raises(AclRefusedError, match="CREATE"):
        g.check(Conn(), request(RC.UPDATE_AND_CREATE_TOPIC, create), Broker())
    acls.allow(m.RES_TOPIC, "fresh", m.OP_CREATE)
    g.check(Conn(), request(RC.UPDATE_AND_CREATE_TOPIC, create), Broker())


def test_unsigned_requests_are_refused_unless_anonymous_is_allowed() -> None:
    acls = Acls()
    unsigned = request(RC.GET_MAX_OFFSET, {"topic": "orders", "queueId": 0}, sign=False)
    with pytest.raises(AclRefusedError, match="No accessKey"):
        guard(acls).check(Conn(), unsigned, Broker())
    empty_key = request(RC.GET_MAX_OFFSET, {"topic": "orders", "AccessKey": ""}, sign=False)
    with pytest.raises(AclRefusedError, match="No accessKey"):
        guard(acls).check(Conn(), empty_key, Broker())
    open_guard = guard(acls, allow_anonymous=True)
    with pytest.raises(AclRefusedError, match="User:ANONYMOUS is not authorized"):
        open_guard.check(Conn(), unsigned, Broker())
    acls.allow(m.RES_TOPIC, "orders", m.OP_DESCRIBE, ANONYMOUS)
    assert open_guard.check(Conn(), unsigned, Broker()) == ANONYMOUS
    forged = request(RC.GET_MAX_OFFSET, {"topic": "orders"})
    forged.ext_fields["topic"] = "other"  # changed after signing
    with pytest.raises(AclRefusedError, match="Check signature failed"):
        open_guard.check(Conn(), forged, Broker())
