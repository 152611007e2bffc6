"""`apache.rocketmq.v2.MessagingService`: one handler per RPC, over a `MessagingBackend`.

`METHODS` is the table: path -> (request class, handler, kind).  Unary handlers return one
response; ReceiveMessage and PullMessage return the list of responses their stream carries;
Telemetry is a conversation and is driven by the listener with `telemetry_reply`.  A failure
inside a handler (`RpcFailure`, or a shared broker path's exception mapped by `failure_of`)
becomes the method's response with that status, as RocketMQ 5 answers; a method that is not in
the table ends with gRPC UNIMPLEMENTED (the listener's doing), never a hang.

This module never does I/O of its own: it awaits the backend.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from google.protobuf import duration_pb2
from google.protobuf.message import Message

from protocols.kafka.acl_model import OP_DESCRIBE, OP_READ
from protocols.rocketmq.grpc.auth import (
    create_need,
    group_need,
    needs_consume,
    needs_describe,
    needs_write,
    topic_need,
)
from protocols.rocketmq.grpc.backend import (
    Caller,
    MessagingBackend,
    PullRequest,
    QueueRoute,
    ReceiveRequest,
)
from protocols.rocketmq.grpc.errors import RpcFailure, failure_of
from protocols.rocketmq.grpc.messages import (
    duration_millis,
    from_grpc,
    parse_recall_handle,
    timestamp,
    to_grpc,
    to_millis,
)
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.grpc.v2 import service_pb2 as spb
from protocols.rocketmq.message_encoding import PROPERTY_TAGS
from protocols.rocketmq.sql_filter import SqlFilter, SqlFilterError, parse_sql_filter
from protocols.rocketmq.subscription import parse_tag_expression

SERVICE_PREFIX = "/apache.rocketmq.v2.MessagingService/"
ACCEPTED_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
MAX_BATCH = 32
MAX_PULL_BATCH = 1024
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MIN_INVISIBLE_MS = 1000
MAX_LONG_POLL_MS = 30_000
DEFAULT_LONG_POLL_MS = 20_000
MAX_BODY_BYTES = 4 * 1024 * 1024
RECONSUME_DELAYS_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600,
                      7200)


class Kind(Enum):
    UNARY = "unary"
    SERVER_STREAM = "server-stream"
    BIDI = "bidi"


Handler = Callable[[MessagingBackend, Caller, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Method:
    name: str
    request: type[Message]
    response: type[Message]
    kind: Kind
    handler: Handler | None


def ok() -> pb.Status:
    return pb.Status(code=pb.OK, message="OK")


def status_of(failure: RpcFailure) -> pb.Status:
    return pb.Status(code=failure.code, message=failure.message)  # type: ignore[arg-type]


def _queues(routes: list[QueueRoute], topic: str, namespace: str) -> list[pb.MessageQueue]:
    out: list[pb.MessageQueue] = []
    for route in routes:
        scheme = pb.IPv4 if route.host.replace(".", "").isdigit() else pb.DOMAIN_NAME
        broker = pb.Broker(name=route.broker_name, id=0, endpoints=pb.Endpoints(
            scheme=scheme, addresses=[pb.Address(host=route.host, port=route.port)]))
        out.extend(pb.MessageQueue(topic=pb.Resource(resource_namespace=namespace, name=topic),
                                   id=i, permission=pb.READ_WRITE, broker=broker,
                                   accept_message_types=ACCEPTED_TYPES)
                   for i in range(route.queues))
    return out


async def query_route(backend: MessagingBackend, caller: Caller,
                      req: spb.QueryRouteRequest) -> spb.QueryRouteResponse:
    topic = req.topic.name
    backend.authorize(caller, needs_describe(topic) if backend.topic_exists(topic)
                      else [create_need(topic)])
    routes = await backend.routes(topic, create=True)
    return spb.QueryRouteResponse(status=ok(), message_queues=_queues(
        routes, topic, req.topic.resource_namespace))


async def query_assignment(backend: MessagingBackend, caller: Caller,
                           req: spb.QueryAssignmentRequest) -> spb.QueryAssignmentResponse:
    # Consumers pop from any queue (the delivery engine hands each record to one of them), so
    # every member is assigned every queue, as RocketMQ 5's pop mode does.
    topic = req.topic.name
    backend.authorize(caller, [topic_need(topic, OP_DESCRIBE), group_need(req.group.name, OP_READ)])
    queues = _queues(await backend.routes(topic, create=False), topic,
                     req.topic.resource_namespace)
    return spb.QueryAssignmentResponse(status=ok(),
                                       assignments=[pb.Assignment(message_queue=q) for q in queues])


async def heartbeat(backend: MessagingBackend, caller: Caller,
                    req: spb.HeartbeatRequest) -> spb.HeartbeatResponse:
    group = req.group.name if req.HasField("group") else None
    if group:
        backend.authorize(caller, [group_need(group, OP_READ)])
    backend.heartbeat(caller, group, req.client_type)
    return spb.HeartbeatResponse(status=ok())


async def send_message(backend: MessagingBackend, caller: Caller,
                       req: spb.SendMessageRequest) -> spb.SendMessageResponse:
    if not req.messages:
        raise RpcFailure(pb.BAD_REQUEST, "no messages to send")
    outgoing = []
    for message in req.messages:
        if len(message.body) > MAX_BODY_BYTES:
            raise RpcFailure(pb.MESSAGE_BODY_TOO_LARGE,
                             f"body of {len(message.body)} bytes exceeds {MAX_BODY_BYTES}")
        outgoing.append(from_grpc(message))
    if len({m.topic for m in outgoing}) != 1:
        raise RpcFailure(pb.BAD_REQUEST, "a batch goes to one topic")
    backend.authorize(caller, needs_write(outgoing[0].topic))
    results = await backend.send(caller, outgoing)
    entries = [spb.SendResultEntry(status=ok(), message_id=r.message_id,
                                   transaction_id=r.transaction_id, offset=r.offset,
                                   recall_handle=r.recall_handle)
               for r in results]
    return spb.SendMessageResponse(status=ok(), entries=entries)


async def recall_message(backend: MessagingBackend, caller: Caller,
                         req: spb.RecallMessageRequest) -> spb.RecallMessageResponse:
    handle = parse_recall_handle(req.recall_handle)
    backend.authorize(caller, needs_write(req.topic.name))
    await backend.recall(caller, req.topic.name, handle)
    return spb.RecallMessageResponse(status=ok(), message_id=handle.message_id)


async def end_transaction(backend: MessagingBackend, caller: Caller,
                          req: spb.EndTransactionRequest) -> spb.EndTransactionResponse:
    if req.resolution not in (pb.COMMIT, pb.ROLLBACK):
        raise RpcFailure(pb.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
    backend.authorize(caller, needs_write(req.topic.name))
    await backend.end_transaction(caller, req.topic.name, req.message_id, req.transaction_id,
                                  req.resolution == pb.COMMIT)
    return spb.EndTransactionResponse(status=ok())


def _millis(value: duration_pb2.Duration, default: int, low: int, high: int, code: int,
            what: str) -> int:
    ms = duration_millis(value) if value.ByteSize() else default
    if not low <= ms <= high:
        raise RpcFailure(code, f"{what} {ms} ms is outside [{low}, {high}]")
    return ms


def _consumer_request(group: pb.Resource, expression: pb.FilterExpression, batch: int,
                      max_batch: int) -> tuple[str, SqlFilter | None]:
    """Check what a receive or pull names; (tag expression, SQL92 filter or None)."""
    if not group.name:
        raise RpcFailure(pb.ILLEGAL_CONSUMER_GROUP, "no consumer group")
    if not 1 <= batch <= max_batch:
        raise RpcFailure(pb.BAD_REQUEST, f"batch size {batch} is outside [1, {max_batch}]")
    if expression.type == pb.SQL:
        try:
            return "*", parse_sql_filter(expression.expression)
        except SqlFilterError as exc:
            raise RpcFailure(pb.ILLEGAL_FILTER_EXPRESSION, f"SQL92 filter: {exc}") from exc
    return expression.expression.strip() or "*", None


async def receive_message(backend: MessagingBackend, caller: Caller,
                          req: spb.ReceiveMessageRequest) -> list[spb.ReceiveMessageResponse]:
    batch = req.batch_size
    tags, sql = _consumer_request(req.group, req.filter_expression, batch, MAX_BATCH)
    invisible = _millis(req.invisible_duration, 30_000, MIN_INVISIBLE_MS, MAX_INVISIBLE_MS,
                        pb.ILLEGAL_INVISIBLE_TIME, "invisible duration")
    poll = _millis(req.long_polling_timeout, DEFAULT_LONG_POLL_MS, 0, MAX_LONG_POLL_MS,
                   pb.ILLEGAL_POLLING_TIME, "long polling timeout")
    queue = req.message_queue
    backend.authorize(caller, needs_consume(queue.topic.name, req.group.name))
    delivered = await backend.receive(caller, ReceiveRequest(
        req.group.name, queue.topic.name, queue.id if queue.topic.name else -1, tags, batch,
        invisible, poll, fifo=False, sql=sql))
    if not delivered:
        return [spb.ReceiveMessageResponse(status=pb.Status(code=pb.MESSAGE_NOT_FOUND,
                                                            message="no new message"))]
    out = [spb.ReceiveMessageResponse(status=ok())]
    out.extend(spb.ReceiveMessageResponse(message=to_grpc(d, queue.topic.resource_namespace))
               for d in delivered)
    # When the batch left the broker: clients measure their receive latency from it.
    out.append(spb.ReceiveMessageResponse(delivery_timestamp=timestamp(int(time.time() * 1000))))
    return out


async def pull_message(backend: MessagingBackend, caller: Caller,
                       req: spb.PullMessageRequest) -> list[spb.PullMessageResponse]:
    batch = req.batch_size
    tags, sql = _consumer_request(req.group, req.filter_expression, batch, MAX_PULL_BATCH)
    if req.offset < 0:
        raise RpcFailure(pb.ILLEGAL_OFFSET, "offset must not be negative")
    poll = _millis(req.long_polling_timeout, DEFAULT_LONG_POLL_MS, 0, MAX_LONG_POLL_MS,
                   pb.ILLEGAL_POLLING_TIME, "long polling timeout")
    queue = req.message_queue
    backend.authorize(caller, needs_consume(queue.topic.name, req.group.name))
    tag_filter = parse_tag_expression(tags)
    wanted: Callable[[dict[str, str]], bool] = (
        sql.matches if sql is not None
        else lambda props: tag_filter.matches(props.get(PROPERTY_TAGS)))
    result = await backend.pull(caller, PullRequest(queue.topic.name, queue.id, req.offset,
                                                    batch, poll, wanted))
    message = "OK" if result.code == pb.OK else (
        "no new message" if result.code == pb.MESSAGE_NOT_FOUND else "offset out of range")
    out = [spb.PullMessageResponse(status=pb.Status(code=result.code,  # type: ignore[arg-type]
                                                    message=message))]
    out.extend(spb.PullMessageResponse(message=to_grpc(d, queue.topic.resource_namespace))
               for d in result.messages)
    out.append(spb.PullMessageResponse(next_offset=result.next_offset))
    return out


async def ack_message(backend: MessagingBackend, caller: Caller,
                      req: spb.AckMessageRequest) -> spb.AckMessageResponse:
    backend.authorize(caller, needs_consume(req.topic.name, req.group.name))
    entries = []
    failed = 0
    # One call for the whole request: the engine settles a queue's entries in one durable write.
    refusals = await backend.ack(caller, req.group.name, req.topic.name,
                                 [entry.receipt_handle for entry in req.entries])
    for entry, refusal in zip(req.entries, refusals, strict=True):
        if refusal is None:
            status = ok()
        else:  # each entry gets its own status
            failed += 1
            status = status_of(failure_of(refusal))
        entries.append(spb.AckMessageResultEntry(message_id=entry.message_id,
                                                 receipt_handle=entry.receipt_handle,
                                                 status=status))
    overall = ok() if not failed else (
        entries[0].status if failed == len(entries)
        else pb.Status(code=pb.MULTIPLE_RESULTS, message="some entries failed"))
    return spb.AckMessageResponse(status=overall, entries=entries)


async def change_invisible_duration(
        backend: MessagingBackend, caller: Caller,
        req: spb.ChangeInvisibleDurationRequest) -> spb.ChangeInvisibleDurationResponse:
    invisible = _millis(req.invisible_duration, 30_000, 0, MAX_INVISIBLE_MS,
                        pb.ILLEGAL_INVISIBLE_TIME, "invisible duration")
    backend.authorize(caller, needs_consume(req.topic.name, req.group.name))
    handle = await backend.change_invisible(caller, req.group.name, req.topic.name,
                                            req.receipt_handle, invisible)
    return spb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle)


async def forward_to_dead_letter(
        backend: MessagingBackend, caller: Caller,
        req: spb.ForwardMessageToDeadLetterQueueRequest
) -> spb.ForwardMessageToDeadLetterQueueResponse:
    backend.authorize(caller, needs_consume(req.topic.name, req.group.name))
    await backend.forward_to_dead_letter(caller, req.group.name, req.topic.name,
                                         req.receipt_handle)
    return spb.ForwardMessageToDeadLetterQueueResponse(status=ok())


async def notify_client_termination(
        backend: MessagingBackend, caller: Caller,
        req: spb.NotifyClientTerminationRequest) -> spb.NotifyClientTerminationResponse:
    await backend.terminate(caller, req.group.name if req.HasField("group") else None)
    return spb.NotifyClientTerminationResponse(status=ok())


async def get_offset(backend: MessagingBackend, caller: Caller,
                     req: spb.GetOffsetRequest) -> spb.GetOffsetResponse:
    backend.authorize(caller, [topic_need(req.message_queue.topic.name, OP_DESCRIBE),
                               group_need(req.group.name, OP_DESCRIBE)])
    offset = await backend.get_offset(req.group.name, req.message_queue.topic.name,
                                      req.message_queue.id)
    if offset is None:
        raise RpcFailure(pb.OFFSET_NOT_FOUND, "the group has no offset for this queue")
    return spb.GetOffsetResponse(status=ok(), offset=offset)


async def update_offset(backend: MessagingBackend, caller: Caller,
                        req: spb.UpdateOffsetRequest) -> spb.UpdateOffsetResponse:
    if req.offset < 0:
        raise RpcFailure(pb.ILLEGAL_OFFSET, "offset must not be negative")
    backend.authorize(caller, needs_consume(req.message_queue.topic.name, req.group.name))
    await backend.update_offset(caller, req.group.name, req.message_queue.topic.name,
                                req.message_queue.id, req.offset)
    return spb.UpdateOffsetResponse(status=ok())


async def query_offset(backend: MessagingBackend, caller: Caller,
                       req: spb.QueryOffsetRequest) -> spb.QueryOffsetResponse:
    backend.authorize(caller, needs_describe(req.message_queue.topic.name))
    ts = to_millis(req.timestamp) if req.HasField("timestamp") else 0
    offset = await backend.query_offset(req.message_queue.topic.name, req.message_queue.id,
                                        req.query_offset_policy, ts)
    return spb.QueryOffsetResponse(status=ok(), offset=offset)


def _method(name: str, kind: Kind, handler: Handler | None) -> tuple[str, Method]:
    request = getattr(spb, f"{name}Request", None) or spb.TelemetryCommand
    response = getattr(spb, f"{name}Response", None) or spb.TelemetryCommand
    return SERVICE_PREFIX + name, Method(name, request, response, kind, handler)


METHODS: dict[str, Method] = dict([
    _method("QueryRoute", Kind.UNARY, query_route),
    _method("Heartbeat", Kind.UNARY, heartbeat),
    _method("SendMessage", Kind.UNARY, send_message),
    _method("QueryAssignment", Kind.UNARY, query_assignment),
    _method("ReceiveMessage", Kind.SERVER_STREAM, receive_message),
    _method("AckMessage", Kind.UNARY, ack_message),
    _method("ForwardMessageToDeadLetterQueue", Kind.UNARY, forward_to_dead_letter),
    _method("EndTransaction", Kind.UNARY, end_transaction),
    _method("NotifyClientTermination", Kind.UNARY, notify_client_termination),
    _method("ChangeInvisibleDuration", Kind.UNARY, change_invisible_duration),
    _method("GetOffset", Kind.UNARY, get_offset),
    _method("UpdateOffset", Kind.UNARY, update_offset),
    _method("QueryOffset", Kind.UNARY, query_offset),
    _method("RecallMessage", Kind.UNARY, recall_message),
    _method("PullMessage", Kind.SERVER_STREAM, pull_message),
    _method("Telemetry", Kind.BIDI, None),
])


def failure_response(method: Method, failure: RpcFailure) -> list[Message]:
    """The response (or stream) a failed call answers with."""
    return [method.response(status=status_of(failure))]


def telemetry_reply(backend: MessagingBackend, caller: Caller,
                    command: spb.TelemetryCommand) -> spb.TelemetryCommand | None:
    """The server's answer to one command a client writes on its Telemetry stream: its
    settings are answered with the server's (which the client waits for at start)."""
    if command.WhichOneof("command") != "settings":
        return None  # thread stack traces and verify results: nothing to answer
    asked = command.settings
    settings = pb.Settings()
    if asked.HasField("client_type"):
        settings.client_type = asked.client_type
    settings.backoff_policy.max_attempts = 3
    settings.backoff_policy.exponential_backoff.initial.FromMilliseconds(100)
    settings.backoff_policy.exponential_backoff.max.FromMilliseconds(5000)
    settings.backoff_policy.exponential_backoff.multiplier = 2.0
    settings.request_timeout.FromMilliseconds(3000)
    if asked.WhichOneof("pub_sub") == "publishing":
        settings.publishing.topics.extend(asked.publishing.topics)
        settings.publishing.max_body_size = MAX_BODY_BYTES
        settings.publishing.validate_message_type = False
    elif asked.WhichOneof("pub_sub") == "subscription":
        sub = asked.subscription
        group = sub.group.name
        # Consumers retry at RocketMQ's reconsume delays (10s, 30s, 1m, ... 2h), as 4.x does.
        settings.backoff_policy.Clear()
        settings.backoff_policy.max_attempts = backend.max_delivery_attempts(group)
        settings.backoff_policy.customized_backoff.next.extend(
            duration_pb2.Duration(seconds=s) for s in RECONSUME_DELAYS_S)
        settings.subscription.group.CopyFrom(sub.group)
        settings.subscription.subscriptions.extend(sub.subscriptions)
        settings.subscription.fifo = backend.is_fifo(group)
        settings.subscription.receive_batch_size = MAX_BATCH
        settings.subscription.long_polling_timeout.FromMilliseconds(DEFAULT_LONG_POLL_MS)
    settings.metric.on = False
    return spb.TelemetryCommand(status=ok(), settings=settings)
