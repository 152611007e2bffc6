"""What the RocketMQ 5 front asks of the broker: the interface its handlers are written against.

The handlers (service.py) decode a request, call one of these, and build the response; the
broker side (gateway/rocketmq/grpc_backend.py) implements them on the same RocketMQ topic
service the 4.x front uses (sends, delays, transactions, offsets, subscription groups) and on
the per-record delivery engine (gateway/delivery) for receive, ack and invisibility.

This module holds no behaviour.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from protocols.rocketmq.access import Need
from protocols.rocketmq.grpc.messages import Delivered, OutgoingMessage, RecallHandle
from protocols.rocketmq.sql_filter import SqlFilter


@dataclass(frozen=True)
class Caller:
    """Who makes a call: the client id from its metadata, its address and its principal."""

    client_id: str
    peer: tuple[str, int]
    principal: str
    namespace: str = ""
    forwarded: bool = False  # another broker of the cluster forwarded this call


@dataclass(frozen=True)
class SendResult:
    message_id: str
    transaction_id: str
    offset: int
    recall_handle: str = ""  # a timed message's, while it waits


@dataclass(frozen=True)
class QueueRoute:
    """One broker's share of a topic's queues: ids 0..queues-1 served at host:port."""

    broker_name: str
    host: str
    port: int
    queues: int


@dataclass(frozen=True)
class ReceiveRequest:
    group: str
    topic: str
    queue_id: int  # the queue the client chose; -1: any
    tag_expression: str  # "*" or "a || b"
    batch_size: int
    invisible_ms: int
    long_poll_ms: int
    fifo: bool
    sql: SqlFilter | None = None  # a SQL92 filter instead of the tag expression


@dataclass(frozen=True)
class PullRequest:
    topic: str
    queue_id: int
    offset: int
    batch_size: int
    long_poll_ms: int
    wanted: Callable[[dict[str, str]], bool]  # the tag or SQL92 filter


@dataclass(frozen=True)
class PullResult:
    code: int  # OK, MESSAGE_NOT_FOUND or ILLEGAL_OFFSET
    messages: list[Delivered]
    next_offset: int


class TelemetrySink(Protocol):
    """A client's open Telemetry stream, to push commands to."""

    def push(self, command: bytes) -> bool: ...


class MessagingBackend(Protocol):
    def endpoint(self) -> tuple[str, int]: ...

    def authorize(self, caller: Caller, needs: list[Need]) -> None:
        """Raise (a NO_PERMISSION RocketMQ error) unless the caller may do all of `needs`."""
        ...

    def topic_exists(self, topic: str) -> bool: ...

    async def routes(self, topic: str, *, create: bool) -> list[QueueRoute]:
        """Where the topic's queues are served now (a cluster: each owning broker's endpoint);
        `create` auto-creates a missing topic as a producer's first route query does."""
        ...

    async def send(self, caller: Caller, messages: list[OutgoingMessage]) -> list[SendResult]: ...

    async def end_transaction(self, caller: Caller, topic: str, message_id: str,
                              transaction_id: str, commit: bool) -> None: ...

    async def recall(self, caller: Caller, topic: str, handle: RecallHandle) -> None:
        """Drop a timed message before it is delivered (RpcFailure when it cannot be)."""
        ...

    async def receive(self, caller: Caller, request: ReceiveRequest) -> list[Delivered]: ...

    async def pull(self, caller: Caller, request: PullRequest) -> PullResult: ...

    async def ack(self, caller: Caller, group: str, topic: str,
                  handles: list[str]) -> list[Exception | None]:
        """Acknowledge each handle; per handle None or what refused it."""
        ...

    async def change_invisible(self, caller: Caller, group: str, topic: str, handle: str,
                               invisible_ms: int) -> str: ...

    async def forward_to_dead_letter(self, caller: Caller, group: str, topic: str,
                                     handle: str) -> None: ...

    def max_delivery_attempts(self, group: str) -> int: ...

    def is_fifo(self, group: str) -> bool: ...

    def heartbeat(self, caller: Caller, group: str | None, client_type: int) -> None: ...

    def open_telemetry(self, caller: Caller, client_type: int, topics: list[str],
                       group: str | None, sink: TelemetrySink) -> None: ...

    def close_telemetry(self, caller: Caller, sink: TelemetrySink) -> None: ...

    async def terminate(self, caller: Caller, group: str | None) -> None: ...

    async def get_offset(self, group: str, topic: str, queue_id: int) -> int | None: ...

    async def update_offset(self, caller: Caller, group: str, topic: str, queue_id: int,
                            offset: int) -> None: ...

    async def query_offset(self, topic: str, queue_id: int, policy: int,
                           timestamp_ms: int) -> int: ...
