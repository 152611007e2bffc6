"""The broker side of RocketMQ 5: routes, sends, transactions, sessions and offsets.

Everything a 5.x client writes goes through the same paths as a 4.x client's: a message is
stored by the 4.x send path's steps (queue resolution and auto-creation, backlog quota, delay
and timer scheduling, transactional half messages), so the topic has one offset space for 4.x,
5.x and Kafka clients.  Receiving, acknowledging and invisibility are grpc_receive.py's, on the
per-record delivery engine.

Sessions: a client's Telemetry stream is its session.  A producer's session is registered as a
producer of one transaction group per topic it publishes to, through an adapter connection, so
the 4.x transaction service's check-back (CHECK_TRANSACTION_STATE) reaches it as a
RecoverOrphanedTransactionCommand on that stream.  A 5.x transaction id is the half message's
offset message id: EndTransaction needs nothing else to find it.

This module must never answer a send before the 4.x path made it durable.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any

import trio

from gateway.rocketmq.delays import RecallRefusedError, SchedulerNotRunningError
from gateway.rocketmq.grpc_pull import pull
from gateway.rocketmq.grpc_receive import GrpcReceiver
from gateway.rocketmq.service import RocketMQBroker
from protocols.kafka.acl_model import OP_WRITE, RES_GROUP, RES_TOPIC
from protocols.kafka.record_batch import Record
from protocols.rocketmq.access import ANONYMOUS, Need, RocketMQGuard
from protocols.rocketmq.acl import (
    PERM_PUB,
    PERM_SUB,
    AclRefusedError,
    PlainAclValidator,
    perm_allows,
)
from protocols.rocketmq.codec import RemotingCommand
from protocols.rocketmq.delay_levels import PROPERTY_TIMER_DELIVER_MS
from protocols.rocketmq.errors import MessageIllegalError, TopicNotExistError
from protocols.rocketmq.grpc.backend import (
    Caller,
    MessagingBackend,
    PullRequest,
    PullResult,
    QueueRoute,
    ReceiveRequest,
    SendResult,
    TelemetrySink,
)
from protocols.rocketmq.grpc.errors import RpcFailure
from protocols.rocketmq.grpc.messages import (
    Delivered,
    OutgoingMessage,
    RecallHandle,
    recall_handle,
    to_grpc,
)
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.grpc.v2 import service_pb2 as spb
from protocols.rocketmq.handlers.common import find_topic, get_queue, topic_info
from protocols.rocketmq.handlers.send import (
    admit_under_backlog_quota,
    append_records,
    divert_special,
    resolve_queue,
)
from protocols.rocketmq.headers import SendHeader
from protocols.rocketmq.message_encoding import (
    SYS_FLAG_TRANSACTION_PREPARED,
    MessageMeta,
    decode_stored_messages,
    to_record,
)
from protocols.rocketmq.message_id import decode_offset_message_id
from protocols.rocketmq.request_codes import RequestCode
from protocols.rocketmq.topic_names import RETRY_PREFIX, to_storage

log = logging.getLogger("ledgerwire.rocketmq.grpc")

STANDALONE_BROKER_NAME = "ledgerwire"  # the one broker of a standalone's 5.x routes
TXN_GROUP_PREFIX = "%GRPC_TXN%"  # a topic's 5.x transactional producers, as a 4.x group
COMMIT, ROLLBACK = 8, 12
_connection_ids = itertools.count(1 << 40)


def transaction_group(topic: str) -> str:
    return TXN_GROUP_PREFIX + topic


def _session_key(caller: Caller) -> tuple[str, str]:
    return caller.principal, caller.client_id


@dataclass(eq=False)
class TelemetryConnection:
    """A 5.x session as the 4.x client registry sees a connection: broker-initiated requests
    become Telemetry commands on the client's stream."""

    peer: tuple[str, int]
    sink: TelemetrySink
    store_host: tuple[str, int]
    connection_id: int = 0

    def __post_init__(self) -> None:
        self.connection_id = next(_connection_ids)

    def send_request(self, command: RemotingCommand) -> bool:
        if command.code != RequestCode.CHECK_TRANSACTION_STATE:
            return True  # consumer-id changes and the like mean nothing to a 5.x client
        stored = decode_stored_messages(command.body or b"")
        if not stored:
            return True
        m = stored[0]
        ext = command.ext_fields
        delivered = Delivered(m.topic, m.queue_id, m.queue_offset, m.body, m.properties,
                              MessageMeta(m.flag, m.sys_flag, m.born_host, m.store_timestamp),
                              m.born_timestamp, 1, "", 0, str(ext.get("offsetMsgId", "")))
        check = spb.RecoverOrphanedTransactionCommand(
            message=to_grpc(delivered), transaction_id=str(ext.get("offsetMsgId", "")))
        return self.sink.push(
            spb.TelemetryCommand(recover_orphaned_transaction_command=check).SerializeToString())


class _SendConnection:
    """What the 4.x send path reads of a connection: who sent the message."""

    def __init__(self, peer: tuple[str, int]) -> None:
        self.peer = peer
        self.connection_id = 0

    def send_request(self, command: RemotingCommand) -> bool:
        return False


Guard = RocketMQGuard | PlainAclValidator | None


async def recall_on(broker: RocketMQBroker, topic: str, handle: RecallHandle) -> None:
    """Recall a timed message waiting in `broker`'s timer queue (RecallMessage)."""
    delays = getattr(broker, "delays", None)
    if delays is None:
        raise RpcFailure(pb.UNSUPPORTED, "timed messages are not enabled")
    try:
        await delays.recall(topic, handle.offset, handle.message_id)
    except RecallRefusedError as exc:
        raise RpcFailure(pb.NOT_FOUND, str(exc)) from exc
    except SchedulerNotRunningError as exc:
        raise RpcFailure(pb.INTERNAL_SERVER_ERROR, str(exc)) from exc


def guard_for_grpc(guard: Guard) -> RocketMQGuard | None:
    """The 4.x door's guard as the 5.x door authenticates with it: the plain ACL alone (an
    unsecured broker with [rocketmq.acl] on) always wants a signature."""
    if isinstance(guard, PlainAclValidator):
        return RocketMQGuard(accounts=guard, plain_permissions=True, require_signature=True)
    return guard


class GrpcBackend(MessagingBackend):
    def __init__(self, broker: RocketMQBroker, receiver: GrpcReceiver,
                 advertised: tuple[str, int], guard: RocketMQGuard | None = None) -> None:
        self.broker = broker
        self.receiver = receiver
        self._advertised = advertised
        self.guard = guard
        self.broker_name = STANDALONE_BROKER_NAME  # what routes and recall handles name
        # per (principal, client id): a client id is the client's own claim, so another
        # principal naming it must not replace or end its session
        self._sessions: dict[tuple[str, str], tuple[TelemetryConnection, list[str]]] = {}

    def endpoint(self) -> tuple[str, int]:
        return self._advertised

    # ---- authorization (one model with the 4.x door and Kafka) ----------------------------
    def authorize(self, caller: Caller, needs: list[Need]) -> None:
        guard = self.guard
        if guard is None:
            return
        if guard.authorizer is not None:
            guard.authorize(caller.principal, caller.peer[0], needs)
        if guard.plain_permissions and guard.accounts is not None:
            self._plain_permissions(guard.accounts, caller.principal, needs)

    @staticmethod
    def _plain_permissions(accounts: PlainAclValidator, principal: str,
                           needs: list[Need]) -> None:
        """The RocketMQ plain ACL's own topic/group permissions (PUB to write, SUB else)."""
        if principal == ANONYMOUS:
            return  # a globally white-listed peer: Apache's plain ACL lets it do anything
        account = accounts.accounts.get(principal.removeprefix("User:"))
        if account is None:
            raise AclRefusedError(f"AclException: no account for {principal}")
        for need in needs:
            if need.resource_type == RES_TOPIC:
                resource = need.name
            elif need.resource_type == RES_GROUP:
                resource = RETRY_PREFIX + need.name
            else:
                continue
            wanted = PERM_PUB if need.operation == OP_WRITE else PERM_SUB
            owned, _ = account.perm_for(resource)
            if not perm_allows(wanted, owned):
                raise AclRefusedError(f"AclException: {principal} may not use {resource}")

    def topic_exists(self, topic: str) -> bool:
        return topic_info(self.broker, topic) is not None

    # ---- routes -------------------------------------------------------------------------
    async def queue_count(self, topic: str, *, create: bool) -> int:
        """The topic's queue count on this broker (auto-created when `create` allows)."""
        try:
            return (await find_topic(self.broker, topic)).partitions
        except TopicNotExistError:
            cfg = self.broker.config
            if not (create and cfg.auto_create_topics):
                raise
        info = await self.broker.ensure_topic(to_storage(topic), cfg.default_queue_nums)
        return info.partitions

    async def routes(self, topic: str, *, create: bool) -> list[QueueRoute]:
        host, port = self._advertised
        return [QueueRoute(self.broker_name, host, port,
                           await self.queue_count(topic, create=create))]

    # ---- sends --------------------------------------------------------------------------
    async def send(self, caller: Caller, messages: list[OutgoingMessage]) -> list[SendResult]:
        broker = self.broker
        conn = _SendConnection(caller.peer)
        now = int(time.time() * 1000)
        results: list[SendResult] = []
        plain: dict[int, list[tuple[int, Record, str]]] = {}
        for index, m in enumerate(messages):
            txn = m.message_type == pb.TRANSACTION
            header = SendHeader(
                producer_group=transaction_group(m.topic) if txn else "",
                topic=m.topic, default_topic="", default_topic_queue_nums=0,
                queue_id=m.queue_id, sys_flag=SYS_FLAG_TRANSACTION_PREPARED if txn else 0,
                born_timestamp=m.born_timestamp or now, flag=0, properties="",
                reconsume_times=0, max_reconsume_times=-1, batch=False)
            queue_id = await resolve_queue(broker, header)
            await admit_under_backlog_quota(broker, m.topic, queue_id)
            born = m.born_timestamp or now
            diverted = await divert_special(broker, conn, header, queue_id,
                                            (m.body, dict(m.properties), 0), now, born)
            if diverted is not None:
                offset = int(diverted["queueOffset"])  # type: ignore[call-overload]
                timed = not txn and PROPERTY_TIMER_DELIVER_MS in m.properties
                results.append(SendResult(
                    m.message_id, str(diverted["msgId"]) if txn else "", offset,
                    recall_handle(self.broker_name, offset, m.message_id) if timed else ""))
                continue
            if txn:
                raise MessageIllegalError("transactional messages are not enabled")
            meta = MessageMeta(born_host=caller.peer, store_timestamp=now)
            plain.setdefault(queue_id, []).append(
                (index, to_record(m.body, dict(m.properties), meta, born), m.message_id))
            results.append(SendResult(m.message_id, "", -1))
        for queue_id, items in plain.items():
            base = await append_records(broker, messages[0].topic, queue_id,
                                        [record for _, record, _ in items])
            for i, (index, _record, message_id) in enumerate(items):
                results[index] = SendResult(message_id, "", base + i)
        return results

    async def recall(self, caller: Caller, topic: str, handle: RecallHandle) -> None:
        if handle.broker_name != self.broker_name:
            raise RpcFailure(pb.BAD_REQUEST, f"the recall handle names broker "
                             f"{handle.broker_name}, not this one")
        await recall_on(self.broker, topic, handle)

    async def end_transaction(self, caller: Caller, topic: str, message_id: str,
                              transaction_id: str, commit: bool) -> None:
        transactions = getattr(self.broker, "transactions", None)
        if transactions is None:
            raise RpcFailure(pb.NOT_IMPLEMENTED, "transactions are not enabled")
        try:
            _host, _port, clo = decode_offset_message_id(transaction_id)
            # WRITE on `topic` was checked: only a half message of the topic is decided
            await transactions.end(clo, COMMIT if commit else ROLLBACK,
                                   producer_group=transaction_group(topic))
        except MessageIllegalError as exc:
            raise RpcFailure(pb.INVALID_TRANSACTION_ID, str(exc)) from exc

    # ---- receiving (the delivery engine) --------------------------------------------------
    async def receive(self, caller: Caller, request: ReceiveRequest) -> list[Delivered]:
        return await self.receiver.receive(caller, request)

    async def pull(self, caller: Caller, request: PullRequest) -> PullResult:
        return await pull(self.broker, request)

    async def ack(self, caller: Caller, group: str, topic: str,
                  handles: list[str]) -> list[Exception | None]:
        return await self.receiver.ack_many(group, topic, handles)

    async def change_invisible(self, caller: Caller, group: str, topic: str, handle: str,
                               invisible_ms: int) -> str:
        return await self.receiver.change_invisible(group, topic, handle, invisible_ms)

    async def forward_to_dead_letter(self, caller: Caller, group: str, topic: str,
                                     handle: str) -> None:
        await self.receiver.forward_to_dead_letter(group, topic, handle)

    def max_delivery_attempts(self, group: str) -> int:
        return self.receiver.max_attempts(group)

    def is_fifo(self, group: str) -> bool:
        return self.receiver.is_fifo(group)

    # ---- sessions -----------------------------------------------------------------------
    def heartbeat(self, caller: Caller, group: str | None, client_type: int) -> None:
        session = self._sessions.get(_session_key(caller))
        if session is not None:
            self._register(caller.client_id, *session)

    def open_telemetry(self, caller: Caller, client_type: int, topics: list[str],
                       group: str | None, sink: TelemetrySink) -> None:
        conn = TelemetryConnection(caller.peer, sink, self._advertised)
        groups = [transaction_group(t) for t in topics] if client_type == pb.PRODUCER else []
        old = self._sessions.get(_session_key(caller))
        if old is not None:
            self.broker.clients.connection_closed(old[0])
        self._sessions[_session_key(caller)] = (conn, groups)
        self._register(caller.client_id, conn, groups)

    def _register(self, client_id: str, conn: TelemetryConnection, groups: list[str]) -> None:
        if groups:
            data: dict[str, Any] = {"clientID": client_id, "consumerDataSet": [],
                                    "producerDataSet": [{"groupName": g} for g in groups]}
            self.broker.clients.heartbeat(conn, data, trio.current_time())

    def close_telemetry(self, caller: Caller, sink: TelemetrySink) -> None:
        session = self._sessions.get(_session_key(caller))
        if session is not None and session[0].sink is sink:
            del self._sessions[_session_key(caller)]
            self.broker.clients.connection_closed(session[0])

    async def terminate(self, caller: Caller, group: str | None) -> None:
        # What the client received stays invisible until its duration ends (RocketMQ's pop has
        # no session to release it with); only its registrations go.
        session = self._sessions.pop(_session_key(caller), None)
        if session is not None:
            self.broker.clients.connection_closed(session[0])

    # ---- offsets ------------------------------------------------------------------------
    async def get_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.broker.offsets.query(group, topic, queue_id)

    async def update_offset(self, caller: Caller, group: str, topic: str, queue_id: int,
                            offset: int) -> None:
        await get_queue(self.broker, topic, queue_id)
        await self.broker.offsets.commit(group, topic, queue_id, offset)

    async def query_offset(self, topic: str, queue_id: int, policy: int,
                           timestamp_ms: int) -> int:
        plog = await get_queue(self.broker, topic, queue_id)
        if policy == pb.BEGINNING:
            return plog.log_start_offset
        if policy == pb.END:
            return plog.high_watermark
        found = await plog.offset_for_timestamp(timestamp_ms)
        return found[0] if found is not None else plog.high_watermark
