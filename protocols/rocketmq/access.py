"""Who may do what on the RocketMQ ports: one principal and the Kafka ACL store (sans-IO).

Authentication.  A RocketMQ account (`[[rocketmq.acl.accounts]]`: access key, secret key) is the
principal `User:<access key>`; a request proves it with the AccessKey/Signature extFields that
`acl.PlainAclValidator.authenticate` checks (a peer on the account's white-listed address needs
no signature, as Apache's).  A request without an AccessKey, or from a globally white-listed
peer, is `User:ANONYMOUS`.  When the broker is secured (Kafka SASL or ACLs on) an unsigned
request is refused unless anonymous access is configured explicitly.

Authorization.  Every request is mapped to the Kafka operations it needs (`RULES`: request
code -> (operation, resource type, name) list) and the Kafka authorizer decides, exactly as for
a Kafka client of the same principal: DENY wins, super users pass, no ACL means no access
(unless allow.everyone.if.no.acl.found).  Topics are named by their Kafka (storage) name; a
consumer group is the Kafka group of the same name, and its retry and dead-letter topics
(%RETRY%g, %DLQ%g) count as the group; a transactional producer group is a transactional id.

    send (10, 310, 320)          WRITE topic (CREATE on the cluster or topic when it does not
                                 exist yet: the send auto-creates it); a half message also
                                 WRITE on the transactional id = producer group
    pull (11), offset update     READ topic and group
    offset query (14)            DESCRIBE topic and group
    offsets by time, min/max     DESCRIBE topic
    query / view message         READ topic (by id: every topic the id's hash names)
    heartbeat (34)               READ each consumer group, DESCRIBE each subscribed topic;
                                 a producer group is kept only with WRITE on its
                                 transactional id (it is sent that group's check-backs)
    consumer list, client config DESCRIBE group; unregister, lock/unlock READ group (+ topics);
                                 unregister leaves a producer group alone without WRITE on
                                 its transactional id (whoever names a client id could
                                 otherwise cut its producer off from its check-backs)
    send back (36)               READ group, origin topic and the topic its offset names
    end transaction (37)         WRITE transactional id = producer group
    create/update topic (17)     CREATE on the cluster or topic when new, else ALTER topic
    delete topic (215)           DELETE topic
    subscription group update    ALTER_CONFIGS group; delete (207) DELETE group
    reset offset (222)           READ topic and group
    topic stats (202)            DESCRIBE topic; consume stats (208) DESCRIBE group (+ topic;
                                 without one it lists only the topics the principal may
                                 DESCRIBE: `visible_topics`)
    broker-wide listings         DESCRIBE cluster (all topic configs, runtime info, system
                                 topics, producer connections, all subscription groups,
                                 who consumes a topic)

A request code without a rule needs ALTER on the cluster (fail closed).  With the RocketMQ
plain ACL enabled as well, an account's own topic/group permissions must also allow the request.

This module must never do I/O, and never let a request through whose principal it has not
established.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_ALTER,
    OP_ALTER_CONFIGS,
    OP_CREATE,
    OP_DELETE,
    OP_DESCRIBE,
    OP_READ,
    OP_WRITE,
    RES_CLUSTER,
    RES_GROUP,
    RES_TOPIC,
    RES_TRANSACTIONAL_ID,
)
from protocols.rocketmq.acl import ACCESS_KEY, AclRefusedError, PlainAclValidator
from protocols.rocketmq.codec import RemotingCommand
from protocols.rocketmq.headers import SendHeader
from protocols.rocketmq.message_encoding import (
    SYS_FLAG_TRANSACTION_MASK,
    SYS_FLAG_TRANSACTION_PREPARED,
)
from protocols.rocketmq.message_id import decode_commit_log_offset, topic_hash
from protocols.rocketmq.request_codes import RequestCode
from protocols.rocketmq.topic_names import DLQ_PREFIX, RETRY_PREFIX, from_storage

ANONYMOUS = "User:ANONYMOUS"
_OPERATION_NAMES = {OP_READ: "READ", OP_WRITE: "WRITE", OP_CREATE: "CREATE",
                    OP_DELETE: "DELETE", OP_ALTER: "ALTER", OP_DESCRIBE: "DESCRIBE",
                    OP_ALTER_CONFIGS: "ALTER_CONFIGS"}
_RESOURCE_NAMES = {RES_TOPIC: "topic", RES_GROUP: "group", RES_CLUSTER: "cluster",
                   RES_TRANSACTIONAL_ID: "transactional id"}

log = logging.getLogger("ledgerwire.rocketmq.access")


class AuthorizerLike(Protocol):
    """The Kafka authorizer (gateway's ACL store, with its tenant rules)."""

    def authorize(self, principal: str, host: str, operation: int, resource_type: int,
                  name: str) -> bool: ...


class TopicCatalogue(Protocol):
    def topics(self) -> Any: ...  # storage name -> topic info


@dataclass(frozen=True, slots=True)
class Need:
    """One operation on one resource; `or_else` is an alternative that also satisfies it
    (CREATE on the cluster or on the topic)."""

    operation: int
    resource_type: int
    name: str
    or_else: Need | None = None

    def describe(self) -> str:
        what = _RESOURCE_NAMES.get(self.resource_type, str(self.resource_type))
        return f"{_OPERATION_NAMES.get(self.operation, self.operation)} on {what} {self.name}"


def _storage(topic: str) -> str:
    return topic.replace("%", ".")


# What an operation on a group's retry or dead-letter topic needs on the group: using it
# (its consumers send to, pull from and look at it) is READ; deleting it is DELETE, changing or
# creating it ALTER_CONFIGS (as a subscription group update), so READ alone does not let a
# consumer delete its group's dead letters or change its retry queues.
_ON_GROUP = {OP_DELETE: OP_DELETE, OP_ALTER: OP_ALTER_CONFIGS, OP_CREATE: OP_ALTER_CONFIGS}


def _topic(topic: str | None, operation: int) -> list[Need]:
    """A topic need; a retry or dead-letter topic is its group's."""
    if not topic:
        return []
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return [Need(_ON_GROUP.get(operation, OP_READ), RES_GROUP, topic[len(prefix):])]
    return [Need(operation, RES_TOPIC, _storage(topic))]


def _group(group: str | None, operation: int) -> list[Need]:
    return [Need(operation, RES_GROUP, group)] if group else []


def _cluster(operation: int) -> list[Need]:
    return [Need(operation, RES_CLUSTER, CLUSTER_NAME)]


def _create(topic: str) -> Need:
    return Need(OP_CREATE, RES_CLUSTER, CLUSTER_NAME, Need(OP_CREATE, RES_TOPIC, topic))


def _json_body(request: RemotingCommand) -> dict[str, Any]:
    try:
        doc = json.loads(request.body) if request.body else {}
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise AclRefusedError(f"request body is not JSON: {exc}") from exc
    return doc if isinstance(doc, dict) else {}


Rule = Callable[[RemotingCommand, TopicCatalogue], list[Need]]


def _send(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
    header = SendHeader.parse(request.ext_fields, v2=request.code != RequestCode.SEND_MESSAGE)
    needs = _topic(header.topic, OP_WRITE)
    if needs and needs[0].resource_type == RES_TOPIC and needs[0].name not in topics.topics():
        needs.append(_create(needs[0].name))
    if header.sys_flag & SYS_FLAG_TRANSACTION_MASK == SYS_FLAG_TRANSACTION_PREPARED:
        needs.append(Need(OP_WRITE, RES_TRANSACTIONAL_ID, header.producer_group))
    return needs


def _topic_and_group(operation: int, group_field: str) -> Rule:
    def rule(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
        ext = request.ext_fields
        return _topic(ext.get("topic"), operation) + _group(ext.get(group_field), operation)
    return rule


def _topic_only(operation: int) -> Rule:
    return lambda request, topics: _topic(request.ext_fields.get("topic"), operation)


def _group_only(operation: int, field: str) -> Rule:
    return lambda request, topics: _group(request.ext_fields.get(field), operation)


def _cluster_only(operation: int) -> Rule:
    return lambda request, topics: _cluster(operation)


def _heartbeat(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
    needs: list[Need] = []
    for consumer in _json_body(request).get("consumerDataSet") or []:
        if not isinstance(consumer, dict):
            continue
        needs += _group(str(consumer.get("groupName") or ""), OP_READ)
        for sub in consumer.get("subscriptionDataSet") or []:
            if isinstance(sub, dict) and sub.get("topic"):
                needs += _topic(str(sub["topic"]), OP_DESCRIBE)
    return needs


def _locks(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
    doc = _json_body(request)
    needs = _group(str(doc.get("consumerGroup") or ""), OP_READ)
    for queue in doc.get("mqSet") or []:
        if isinstance(queue, dict):
            needs += _topic(str(queue.get("topic") or ""), OP_READ)
    return needs


def _client_config(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
    return _group(str(_json_body(request).get("group") or ""), OP_DESCRIBE)


def _view_by_id(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
    """READ on every topic the commit-log offset may name (its hash's topics)."""
    try:
        wanted = decode_commit_log_offset(int(request.ext_fields.get("offset", "")))
    except ValueError:
        return []  # the handler answers the malformed request
    return [need for name in topics.topics()
            if topic_hash(from_storage(name)) == wanted.topic_hash
            for need in _topic(from_storage(name), OP_READ)]


def _send_back(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
    """The handler copies the message at `offset` (whatever topic it is in) into the group's
    retry or dead-letter topic, which the group may read: READ on that topic too, not only on
    the originTopic the request claims."""
    ext = request.ext_fields
    return (_group(ext.get("group"), OP_READ) + _topic(ext.get("originTopic"), OP_READ)
            + _view_by_id(request, topics))


def _create_topic(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
    needs = _topic(request.ext_fields.get("topic"), OP_ALTER)
    if needs and needs[0].resource_type == RES_TOPIC and needs[0].name not in topics.topics():
        return [_create(needs[0].name)]
    return needs


def _subscription_group(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
    return _group(str(_json_body(request).get("groupName") or ""), OP_ALTER_CONFIGS)


def _consume_stats(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
    ext = request.ext_fields
    return _group(ext.get("consumerGroup"), OP_DESCRIBE) + _topic(ext.get("topic"), OP_DESCRIBE)


C = RequestCode
RULES: dict[int, Rule] = {
    C.SEND_MESSAGE: _send,
    C.SEND_MESSAGE_V2: _send,
    C.SEND_BATCH_MESSAGE: _send,
    C.PULL_MESSAGE: _topic_and_group(OP_READ, "consumerGroup"),
    C.QUERY_CONSUMER_OFFSET: _topic_and_group(OP_DESCRIBE, "consumerGroup"),
    C.UPDATE_CONSUMER_OFFSET: _topic_and_group(OP_READ, "consumerGroup"),
    C.SEARCH_OFFSET_BY_TIMESTAMP: _topic_only(OP_DESCRIBE),
    C.GET_MAX_OFFSET: _topic_only(OP_DESCRIBE),
    C.GET_MIN_OFFSET: _topic_only(OP_DESCRIBE),
    C.GET_EARLIEST_MSG_STORETIME: _topic_only(OP_DESCRIBE),
    C.QUERY_MESSAGE: _topic_only(OP_READ),
    C.VIEW_MESSAGE_BY_ID: _view_by_id,
    C.HEART_BEAT: _heartbeat,
    C.UNREGISTER_CLIENT: _group_only(OP_READ, "consumerGroup"),
    C.GET_CONSUMER_LIST_BY_GROUP: _group_only(OP_DESCRIBE, "consumerGroup"),
    C.LOCK_BATCH_MQ: _locks,
    C.UNLOCK_BATCH_MQ: _locks,
    C.CHECK_CLIENT_CONFIG: _client_config,
    C.CONSUMER_SEND_MSG_BACK: _send_back,
    C.END_TRANSACTION: lambda request, topics: [
        Need(OP_WRITE, RES_TRANSACTIONAL_ID, request.ext_fields.get("producerGroup", ""))],
    C.UPDATE_AND_CREATE_TOPIC: _create_topic,
    C.DELETE_TOPIC_IN_BROKER: _topic_only(OP_DELETE),
    C.GET_ALL_TOPIC_CONFIG: _cluster_only(OP_DESCRIBE),
    C.GET_BROKER_RUNTIME_INFO: _cluster_only(OP_DESCRIBE),
    C.GET_TOPIC_STATS_INFO: _topic_only(OP_DESCRIBE),
    C.GET_CONSUME_STATS: _consume_stats,
    C.GET_CONSUMER_CONNECTION_LIST: _group_only(OP_DESCRIBE, "consumerGroup"),
    C.GET_PRODUCER_CONNECTION_LIST: _cluster_only(OP_DESCRIBE),
    C.QUERY_TOPIC_CONSUME_BY_WHO: lambda request, topics: (
        _topic(request.ext_fields.get("topic"), OP_DESCRIBE) + _cluster(OP_DESCRIBE)),
    C.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: _cluster_only(OP_DESCRIBE),
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _subscription_group,
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _cluster_only(OP_DESCRIBE),
    C.DELETE_SUBSCRIPTIONGROUP: _group_only(OP_DELETE, "groupName"),
    C.INVOKE_BROKER_TO_RESET_OFFSET: _topic_and_group(OP_READ, "group"),
}


def required(request: RemotingCommand, topics: TopicCatalogue) -> list[Need]:
    """What `request` needs (see the module doc); ALTER on the cluster for a code without a
    rule."""
    rule = RULES.get(request.code)
    return _cluster(OP_ALTER) if rule is None else rule(request, topics)


class RocketMQGuard:
    """Authenticates and authorizes each RocketMQ request (see the module doc)."""

    def __init__(self, *, accounts: PlainAclValidator | None = None,
                 plain_permissions: bool = False, authorizer: AuthorizerLike | None = None,
                 require_signature: bool = False, allow_anonymous: bool = False) -> None:
        self.accounts = accounts
        self.plain_permissions = plain_permissions and accounts is not None
        self.authorizer = authorizer
        self.require_signature = require_signature
        self.allow_anonymous = allow_anonymous

    def principal(self, conn: Any, request: RemotingCommand) -> str:
        """Who sent `request`; raises AclRefusedError when it proves nobody it may be."""
        if self.accounts is not None and self.accounts.globally_white(conn):
            return ANONYMOUS
        if not request.ext_fields.get(ACCESS_KEY):  # the C++ client sends "" when unsigned
            if self.require_signature and not self.allow_anonymous:
                raise AclRefusedError("AclException: No accessKey is configured (this broker "
                                      "requires signed requests)")
            return ANONYMOUS
        if self.accounts is None:
            if self.require_signature:
                raise AclRefusedError(
                    f"AclException: No acl config for {request.ext_fields[ACCESS_KEY]}")
            return ANONYMOUS  # a signing client of an open broker: nothing to check against
        account = self.accounts.authenticate(conn, request)
        return f"User:{account.access_key}"

    @property
    def requires_login(self) -> bool:
        """Must a connection prove an account before it is read normally?  (Only signed
        requests are let in: see protocols/rocketmq/login_gate.py.)"""
        return self.require_signature and not self.allow_anonymous

    def refuse_header(self, conn: Any, request: RemotingCommand) -> None:
        """Raise AclRefusedError when a request's header alone shows that it cannot be
        authenticated (no AccessKey, or one no account has), so its body need not be read.
        The signature itself covers the body: `principal` checks it on the whole request."""
        if self.accounts is not None and self.accounts.globally_white(conn):
            return
        access_key = request.ext_fields.get(ACCESS_KEY)
        if not access_key:
            if self.requires_login:
                raise AclRefusedError("AclException: No accessKey is configured (this broker "
                                      "requires signed requests)")
            return
        if self.require_signature and (self.accounts is None
                                       or self.accounts.accounts.get(access_key) is None):
            raise AclRefusedError(f"AclException: No acl config for {access_key}")

    def check(self, conn: Any, request: RemotingCommand, broker: Any = None) -> str:
        """The principal of an allowed request; raises AclRefusedError (NO_PERMISSION)."""
        if self.plain_permissions and self.accounts is not None:
            # The plain ACL's own rules, as before (it always wants a signature).
            account = self.accounts.check(conn, request)
            principal = ANONYMOUS if account is None else f"User:{account.access_key}"
        else:
            principal = self.principal(conn, request)
        if self.authorizer is not None and broker is not None:
            host = str(conn.peer[0])
            self.authorize(principal, host, required(request, broker.topics))
            if request.code == RequestCode.HEART_BEAT:
                self._keep_owned_producer_groups(request, principal, host)
            elif request.code == RequestCode.UNREGISTER_CLIENT:
                group = request.ext_fields.get("producerGroup")
                if group and not self.authorizer.authorize(principal, host, OP_WRITE,
                                                           RES_TRANSACTIONAL_ID, group):
                    del request.ext_fields["producerGroup"]  # not the principal's to unregister
        return principal

    def _keep_owned_producer_groups(self, request: RemotingCommand, principal: str,
                                    host: str) -> None:
        """A heartbeat's producer groups register its connection for their transaction
        check-backs, which carry the half messages: only the groups whose transactional id
        the principal may WRITE stay in it.  The others are dropped, not refused: every
        producer and consumer heartbeats its groups, transactional or not."""
        assert self.authorizer is not None
        doc = _json_body(request)
        producers = doc.get("producerDataSet") or []
        kept = [p for p in (producers if isinstance(producers, list) else [])
                if isinstance(p, dict) and self.authorizer.authorize(
                    principal, host, OP_WRITE, RES_TRANSACTIONAL_ID, str(p.get("groupName") or ""))]
        if kept != producers:
            doc["producerDataSet"] = kept
            request.body = json.dumps(doc).encode()

    def authorize(self, principal: str, host: str, needs: Iterable[Need]) -> None:
        assert self.authorizer is not None
        for need in needs:
            option: Need | None = need
            while option is not None:
                if self.authorizer.authorize(principal, host, option.operation,
                                             option.resource_type, option.name):
                    break
                option = option.or_else
            else:
                raise AclRefusedError(f"AclException: {principal} is not authorized for "
                                      f"{need.describe()}")

    def visible_topics(self, conn: Any, principal: str, broker: Any = None
                       ) -> Callable[[str], bool]:
        """Which RocketMQ topics a listing the request did not narrow to one topic may show
        `principal`: those it may DESCRIBE (a retry or dead-letter topic: READ on its group),
        as Kafka's OffsetFetch of all topics leaves out the ones its caller may not DESCRIBE."""
        if self.authorizer is None or broker is None:
            return lambda topic: True
        host = str(conn.peer[0])

        def visible(topic: str) -> bool:
            try:
                self.authorize(principal, host, _topic(topic, OP_DESCRIBE))
            except AclRefusedError:
                return False
            return True
        return visible

    def may_describe_topic(self, principal: str, host: str, storage_name: str) -> bool:
        """For the name server: may `principal` learn that the topic exists?"""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(principal, host, OP_DESCRIBE, RES_TOPIC, storage_name)
