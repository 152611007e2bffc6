"""RocketMQ 5 (gRPC) in a cluster broker: bundle b's queues on the gRPC port `base + b`.

As for 4.x (gateway/rocketmq/cluster.py), each ownership bundle is one RocketMQ broker
("<cluster>-b<b>"), and every cluster broker binds the gRPC ports base..base+bundles-1 at start
(`[rocketmq] grpc_listener` is the base port).  A call on port base+b is served by bundle b's
`BundleBroker` (sends, delays, transactions, offsets) and by b's own delivery engine (receive,
ack, invisibility), whose state logs are named after the storage partition, as a standalone's
are, and live with the bundle: opened (fencing the earlier owner) on first use by b's owner,
unloaded when b is released.

Routes: QueryRoute and QueryAssignment, asked on any port of any broker, list every bundle's
queues with the gRPC endpoint of the bundle's owner (read from the live registrations, where
each broker publishes its gRPC host and base port).  A bundle with no known owner is left out
until it has one.

A call that reaches a broker not owning the port's bundle (a client's route is refreshed every
30 s, so it may name a bundle's earlier owner; RecallMessage goes to the client's access point)
is forwarded to the owner (gateway/rocketmq/grpc_forwarding.py), which serves it from the
bundle's durable state: a receipt handed out by the earlier owner is still good there.  With no
other owner known (its owner died and the bundle is not placed yet) it is answered
INTERNAL_SERVER_ERROR "not served here": the 5.x producer retries the send on its next queue,
consumers try again, and the next route refresh sends them to the owner.  A call that reaches
the bundle's new owner while it still loads the bundle (fencing and recovering the earlier
owner's ledgers) waits for the load, up to LOADING_WAIT_S, rather than being refused.

This module must never serve a queue of a bundle this broker does not own, nor answer a send
before the bundle broker made it durable.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, NoReturn, TypeVar

import trio

from gateway.config.settings import RocketMQConfig, parse_host_port
from gateway.delivery.delivery_service import (
    DeliveryService,
    NotOwnedError,
    delete_state_ledger,
)
from gateway.rocketmq.adoption import PortAdoption, RocketMQAddress
from gateway.rocketmq.bundle_logs import BundleNotServedError
from gateway.rocketmq.cluster import ClusterRocketMQ
from gateway.rocketmq.grpc_backend import GrpcBackend, guard_for_grpc, recall_on
from gateway.rocketmq.grpc_forwarding import ForwardTo
from gateway.rocketmq.grpc_listener import serve_rocketmq_grpc
from gateway.rocketmq.grpc_receive import GrpcReceiver, pop_ledger_name
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from protocols.rocketmq.access import RocketMQGuard
from protocols.rocketmq.grpc.auth import principal_of
from protocols.rocketmq.grpc.backend import (
    Caller,
    PullRequest,
    PullResult,
    QueueRoute,
    ReceiveRequest,
    SendResult,
)
from protocols.rocketmq.grpc.errors import RpcFailure
from protocols.rocketmq.grpc.messages import Delivered, OutgoingMessage, RecallHandle
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.topic_names import to_storage

log = logging.getLogger("ledgerwire.rocketmq.grpc")

REGISTRATION_KEY = "rocketmq_grpc"
# how long a call on a bundle this broker holds but still loads waits for it (well inside a
# 5.x client's request timeout, 3 s by default for sends, and longer than most loads)
LOADING_WAIT_S = 2.5
_WILDCARD = ("", "0.0.0.0", "::")
T = TypeVar("T")


def not_served(exc: BaseException) -> RpcFailure:
    """What a call on a bundle owned elsewhere is answered (a code 5.x clients retry)."""
    return RpcFailure(pb.INTERNAL_SERVER_ERROR,
                      f"{exc}: not served by this broker now; the next route refresh finds "
                      "the owner")


def _principal(metadata: dict[str, str], conn: Any, *, guard: RocketMQGuard | None) -> str:
    return principal_of(metadata, conn, guard)


class ClusterGrpcBackend(GrpcBackend):
    """Bundle b's MessagingBackend: routes for the whole cluster, calls for b only."""

    def __init__(self, grpc: ClusterGrpc, bundle: int, receiver: GrpcReceiver) -> None:
        side = grpc.side
        broker = side.brokers[bundle]
        super().__init__(broker, receiver,  # type: ignore[arg-type]  # a BrokerLike
                         (grpc.advertised_host, grpc.base_port + bundle),
                         guard_for_grpc(side.acl))  # type: ignore[arg-type]
        self._grpc = grpc
        self.bundle = bundle
        self.broker_name = side.queue_map.broker_name(bundle)

    async def routes(self, topic: str, *, create: bool) -> list[QueueRoute]:
        await self.queue_count(topic, create=create)  # exists (or is made) with its queues
        side = self._grpc.side
        info = side.topics.topics().get(to_storage(topic))
        if info is None:
            return []
        out = []
        for b in range(side.queue_map.bundles):
            count = side.queue_map.queue_count(info.name, info.partitions, b)
            address = self._grpc.address_of(b)
            if count and address is not None:
                out.append(QueueRoute(side.queue_map.broker_name(b), *address, count))
        return out

    def _forward_or_fail(self, caller: Caller | None, exc: BaseException,
                         bundle: int) -> NoReturn:
        """ForwardTo the bundle's owner when it is another broker and the call was not
        forwarded already; else the not-served answer."""
        if caller is not None and not caller.forwarded:
            owner = self._grpc.address_of(bundle)
            if owner is not None and owner != (self._grpc.advertised_host,
                                               self._grpc.base_port + bundle):
                raise ForwardTo(*owner) from exc
        raise not_served(exc) from exc

    async def _call(self, caller: Caller | None, fn: Callable[..., Awaitable[T]], *args: Any,
                    bundle: int | None = None) -> T:
        bundle = self.bundle if bundle is None else bundle
        try:
            return await fn(*args)
        except (BundleNotServedError, NotOwnedError) as exc:
            # held here but still loading (a failover's fencing and recovery): wait for it
            if not await self._grpc.side.ownership.until_ready(bundle, LOADING_WAIT_S):
                self._forward_or_fail(caller, exc, bundle)
        try:
            return await fn(*args)
        except (BundleNotServedError, NotOwnedError) as exc:
            self._forward_or_fail(caller, exc, bundle)

    async def send(self, caller: Caller, messages: list[OutgoingMessage]) -> list[SendResult]:
        return await self._call(caller, super().send, caller, messages)

    async def end_transaction(self, caller: Caller, topic: str, message_id: str,
                              transaction_id: str, commit: bool) -> None:
        await self._call(caller, super().end_transaction, caller, topic, message_id,
                         transaction_id, commit)

    async def recall(self, caller: Caller, topic: str, handle: RecallHandle) -> None:
        """The handle names the bundle broker (clients send RecallMessage to their access
        point, any port): served where that bundle is owned."""
        side = self._grpc.side
        bundle = next((b for b in range(side.queue_map.bundles)
                       if side.queue_map.broker_name(b) == handle.broker_name), None)
        if bundle is None:
            raise RpcFailure(pb.BAD_REQUEST, f"no broker {handle.broker_name} in this cluster")
        await self._call(caller, recall_on, side.brokers[bundle], topic, handle, bundle=bundle)

    async def receive(self, caller: Caller, request: ReceiveRequest) -> list[Delivered]:
        return await self._call(caller, super().receive, caller, request)

    async def pull(self, caller: Caller, request: PullRequest) -> PullResult:
        return await self._call(caller, super().pull, caller, request)

    async def ack(self, caller: Caller, group: str, topic: str,
                  handles: list[str]) -> list[Exception | None]:
        refusals = await self._call(caller, super().ack, caller, group, topic, handles)
        elsewhere = [r for r in refusals if isinstance(r, BundleNotServedError | NotOwnedError)]
        if elsewhere:  # one port, one bundle: every handle is the owner's
            try:
                self._forward_or_fail(caller, elsewhere[0], self.bundle)
            except RpcFailure as failure:
                return [failure if r in elsewhere else r for r in refusals]
        return refusals

    async def change_invisible(self, caller: Caller, group: str, topic: str, handle: str,
                               invisible_ms: int) -> str:
        return await self._call(caller, super().change_invisible, caller, group, topic, handle,
                                invisible_ms)

    async def forward_to_dead_letter(self, caller: Caller, group: str, topic: str,
                                     handle: str) -> None:
        await self._call(caller, super().forward_to_dead_letter, caller, group, topic, handle)

    async def get_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return await self._call(None, super().get_offset, group, topic, queue_id)

    async def update_offset(self, caller: Caller, group: str, topic: str, queue_id: int,
                            offset: int) -> None:
        await self._call(caller, super().update_offset, caller, group, topic, queue_id, offset)

    async def query_offset(self, topic: str, queue_id: int, policy: int,
                           timestamp_ms: int) -> int:
        return await self._call(None, super().query_offset, topic, queue_id, policy,
                                timestamp_ms)


class ClusterGrpc:
    """Every bundle's gRPC port of one cluster broker (a BundleExtension: see the docstring)."""

    def __init__(self, config: RocketMQConfig, side: ClusterRocketMQ,
                 factory: ManagedLedgerFactory, ledger_config: ManagedLedgerConfig) -> None:
        self.side = side
        self.bind_host, self.base_port = parse_host_port(config.grpc_listener)
        if self.base_port <= 0:
            raise ValueError("a cluster broker needs a fixed rocketmq.grpc_listener port: "
                             "bundle b is served on that port + b")
        self.advertised_host = config.advertised_host or (
            self.bind_host if self.bind_host not in _WILDCARD else "127.0.0.1")
        self._factory = factory
        side.topics.deletion_hooks.append(self.topic_deleted)
        self.deliveries: list[DeliveryService] = []
        self.receivers: list[GrpcReceiver] = []
        self.backends: list[ClusterGrpcBackend] = []
        for b, broker in enumerate(side.brokers):
            delivery = GrpcReceiver.build_delivery(
                broker, factory, ledger_config,  # type: ignore[arg-type]
                ledger_name=partial(self._ledger_name, b),
                owns=partial(self._owns, b))
            receiver = GrpcReceiver(broker, delivery)  # type: ignore[arg-type]
            self.deliveries.append(delivery)
            self.receivers.append(receiver)
            self.backends.append(ClusterGrpcBackend(self, b, receiver))

    async def topic_deleted(self, info: Any) -> None:
        """A deleted topic's SimpleConsumer state goes (a topic deletion hook, run here when
        the topic is deleted or leaves the catalogue): what the bundles served here loaded of
        it is closed, and the state log of each of its partitions is deleted."""
        for delivery in self.deliveries:
            await delivery.unload_topic(info.name)
        for partition in range(info.partitions):
            await delete_state_ledger(self._factory, pop_ledger_name(info.name, partition))

    def _owns(self, bundle: int, _topic: str, _queue_id: int) -> bool:
        return self.side.ownership.bundle_is_local(bundle)

    def _ledger_name(self, bundle: int, storage_topic: str, queue_id: int) -> str:
        """The state log of queue `queue_id` of `bundle`: named after its partition (refused
        unless the bundle is owned here)."""
        return pop_ledger_name(storage_topic,
                               self.side.partition_of(bundle, storage_topic, queue_id))

    def registration(self) -> dict[str, object]:
        return {REGISTRATION_KEY: {"host": self.advertised_host, "base_port": self.base_port}}

    def address_of(self, bundle: int) -> tuple[str, int] | None:
        """The gRPC endpoint serving `bundle` now (None: no owner known, or it serves none)."""
        doc = self.side.owner_registration(bundle, REGISTRATION_KEY, self.registration())
        if not isinstance(doc, dict):
            return None
        return str(doc["host"]), int(doc["base_port"]) + bundle

    # ---- bundles --------------------------------------------------------------------------
    async def acquired(self, bundle: int) -> None:
        """Nothing: the first call on the bundle loads its state (opening fences the earlier
        owner's logs)."""

    async def releasing(self, bundle: int) -> None:
        delivery = self.deliveries[bundle]
        for topic, queue_id in delivery.loaded_partitions():
            await delivery.unload(topic, queue_id)

    async def close(self) -> None:
        for delivery in self.deliveries:
            await delivery.close()

    def __repr__(self) -> str:
        return "ClusterGrpc"

    # ---- running --------------------------------------------------------------------------
    async def serve(self, servers: trio.Nursery, background: trio.Nursery) -> None:
        """Bind every bundle's gRPC port (each returns once it accepts) and start the
        receivers' background work.  The ports are bound with SO_REUSEPORT: when this broker
        dies or leaves, a survivor on the same host adopts them as it adopts the 4.x ports
        (gateway/rocketmq/adoption.py), so a 5.x client holding this address reaches the
        bundles' new owners at its next connect instead of at its route refresh."""
        for backend, receiver in zip(self.backends, self.receivers, strict=True):
            await servers.start(self._serve_bundle, backend.bundle, self.bind_host,
                                self.base_port + backend.bundle)
            background.start_soon(receiver.run)
        self.side.adoptions.append(PortAdoption(
            self.side.ownership.me.node_id, RocketMQAddress(self.advertised_host, self.base_port),
            self.bind_host, len(self.backends), self._serve_bundle, key=REGISTRATION_KEY))
        log.info("rocketmq 5 gRPC ports ready", extra={
            "grpc_ports": f"{self.base_port}-{self.base_port + len(self.backends) - 1}"})

    async def _serve_bundle(self, bundle: int, host: str, port: int,
                            task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve bundle `bundle`'s gRPC backend on host:port (its own port, or one adopted)."""
        backend = self.backends[bundle]
        await serve_rocketmq_grpc(backend, host, port,
                                  authenticate=partial(_principal, guard=backend.guard),
                                  connection_limits=self.side.connections, reuse_port=True,
                                  task_status=task_status)
