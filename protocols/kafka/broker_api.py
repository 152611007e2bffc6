"""What the Kafka request handlers need from the broker process, as typing.Protocols.

The handlers in `protocols.kafka.handlers` turn decoded requests into calls on a topic service
and its partition logs; the real implementations live in `gateway/` (TopicService,
PartitionLog, KafkaBroker).  Declaring their shapes here keeps the import rule of the design:
`protocols/` never imports `gateway/`.  `RequestContext` is the one object a handler gets
besides the request header and body.

This module must never import gateway/, Trio networking, or do any I/O: it only declares shapes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from protocols.kafka.built_batch import BuiltBatch


class AppendResultView(Protocol):
    """What a PartitionLog append reports back (gateway.topics.partition_log.AppendResult)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def log_append_time_ms(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...


class PartitionLogApi(Protocol):
    """One partition's offset space (gateway.topics.partition_log.PartitionLog)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    async def append(
        self, records: bytes | memoryview, *, timestamp_type_log_append: bool = False
    ) -> AppendResultView: ...

    async def append_built(self, batch: BuiltBatch) -> AppendResultView:
        """Append a batch this broker encoded (no second framing/CRC check; built_batch.py)."""
        ...

    async def read(self, offset: int, max_bytes: int) -> list[bytes]: ...

    async def wait_for_data(self, offset: int, timeout_s: float, *,
                            committed: bool = False) -> None:
        """Until data past `offset` is readable (`committed`: below the last stable offset)."""
        ...

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [start, end)."""
        ...

    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        """Append a COMMIT/ABORT control batch (transaction coordinator only); its offset."""
        ...

    async def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None: ...

    async def max_timestamp_offset(self) -> tuple[int, int] | None: ...

    async def delete_records_before(self, offset: int) -> int: ...


class TopicInfoView(Protocol):
    """A topic as the topic service describes it (gateway.topics.topic_node.TopicInfo)."""

    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def partitions(self) -> int: ...

    @property
    def configs(self) -> Mapping[str, str]: ...


class TopicServiceApi(Protocol):
    """Topics and their partitions (gateway.topics.topic_service.TopicService)."""

    async def create_topic(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> None: ...

    async def delete_topic(self, name: str) -> None: ...

    async def create_partitions(self, name: str, total: int) -> None: ...

    def topics(self) -> Mapping[str, Any]: ...  # name -> TopicInfoView

    async def partition(self, topic: str, partition: int) -> PartitionLogApi: ...

    async def allocate_producer_id(self) -> int: ...

    async def partition_size(self, topic: str, partition: int) -> int:
        """Bytes stored for a partition this broker owns (its ledgers' lengths)."""
        ...

    async def alter_topic_configs(
        self, name: str, update: Callable[[Mapping[str, str]], dict[str, str]], *,
        validate_only: bool = False,
    ) -> Any: ...


class BrokerSettings(Protocol):
    """The broker identity and knobs the handlers read (gateway.kafka.broker.KafkaBrokerConfig)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def auto_create_topics(self) -> bool: ...

    @property
    def default_partitions(self) -> int: ...

    @property
    def max_message_bytes(self) -> int: ...

    @property
    def max_partitions_per_request(self) -> int: ...

    @property
    def retention_ms(self) -> int: ...

    @property
    def retention_bytes(self) -> int: ...

    @property
    def rack(self) -> str | None: ...


class BrokerApi(Protocol):
    """The broker as handlers see it (gateway.kafka.broker.KafkaBroker)."""

    @property
    def topic_service(self) -> TopicServiceApi: ...

    @property
    def config(self) -> BrokerSettings: ...

    @property
    def advertised_host(self) -> str: ...

    @property
    def advertised_port(self) -> int: ...

    @property
    def group_coordinator(self) -> Any:
        """The GroupCoordinator (protocols.kafka.group_coordinator), or None without groups."""
        ...

    @property
    def transaction_coordinator(self) -> Any:
        """The TransactionCoordinator (protocols.kafka.transaction_coordinator), or None."""
        ...

    def supported_api_versions(self) -> Mapping[int, tuple[int, int]]:
        """api key -> (min, max) version that this broker answers (what ApiVersions advertises)."""
        ...


@dataclass(frozen=True)
class BrokerEndpoint:
    """One live broker as Metadata and FindCoordinator describe it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


class OwnershipApi(Protocol):
    """Which broker owns a partition or a coordinator partition (gateway.cluster.ownership).

    Absent (None) in standalone, where the single broker owns everything.  `is_local` is False
    while this broker is releasing a unit or cannot prove its ZooKeeper session is alive.
    """

    def live_brokers(self) -> list[BrokerEndpoint]: ...

    def listed_brokers(self) -> list[BrokerEndpoint]:
        """The brokers Metadata lists: the live ones and any that left a short while ago."""
        ...

    def owner_of(self, topic: str, partition: int) -> BrokerEndpoint | None: ...

    def is_local(self, topic: str, partition: int) -> bool: ...

    def note_asked(self, topics: Iterable[str]) -> None:
        """A client named these topics in a Metadata request (in demand on a take-over)."""
        ...

    async def until_local(self, topic: str, partition: int, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) while this broker holds the partition's bundle but still
        loads it; then `is_local`."""
        ...

    # A plain produce or fetch needs only the partition's own log, not its bundle's
    # coordinators and extensions.  Every implementation has both methods below; one that
    # serves a partition only with its whole bundle answers them as `is_local` and
    # `until_local` (the rule: serves_partition is never False where is_local is True).

    def serves_partition(self, topic: str, partition: int) -> bool:
        """May Kafka produce and fetch be served on this partition here: `is_local`, or its
        bundle is held and still loading but this partition is already open (fenced and
        recovered)."""
        ...

    async def until_serving(self, topic: str, partition: int, timeout_s: float) -> bool:
        """`until_local` for Kafka produce and fetch: done as soon as `serves_partition`."""
        ...

    def coordinator_owner(self, key_type: int, key: str) -> BrokerEndpoint | None:
        """key_type 0 = consumer group, 1 = transactional id (FindCoordinator's key types)."""
        ...

    def coordinator_is_local(self, key_type: int, key: str) -> bool: ...


def ownership_of(broker: Any) -> OwnershipApi | None:
    """The broker's ownership service, or None when it owns everything (standalone)."""
    return getattr(broker, "ownership", None)


@dataclass
class RequestContext:
    """Everything a handler may use besides the request itself."""

    broker: BrokerApi
    client_address: str = "?"
    # Free-form per-connection facts (client software name from ApiVersions v3+, ...).
    connection_info: dict[str, Any] = field(default_factory=dict)
    # The connection's request ordering (handlers.request_order.ConnectionOrder).
    order: Any = None
    # This request's place in that order (a RequestTurn), set when the request is read.
    turn: Any = None
    # The connection's authentication state (protocols.kafka.sasl.SaslSession, shared by every
    # request of the connection), or None on a listener without SASL.
    session: Any = None

    @property
    def principal(self) -> str:
        """Who sent the request: "User:<name>" once SASL succeeded, else User:ANONYMOUS."""
        principal = getattr(self.session, "principal", None)
        return principal if principal else "User:ANONYMOUS"

    @property
    def client_host(self) -> str:
        host, sep, _port = self.client_address.rpartition(":")
        return host if sep else self.client_address

    def authorize(self, operation: int, resource_type: int, name: str) -> bool:
        """May this request's principal do `operation` on the resource (codes of acl_model)?

        The one place handlers ask; True when the broker has no authorizer (security off).
        """
        authorizer = getattr(self.broker, "authorizer", None)
        if authorizer is None:
            return True
        return bool(authorizer.authorize(self.principal, self.client_host, operation,
                                         resource_type, name))

    def authorize_any(self, operation: int, resource_type: int) -> bool:
        """May this principal do `operation` on some resource of the type (Kafka's
        authorizeByResourceType)?  True when the broker has no authorizer."""
        authorizer = getattr(self.broker, "authorizer", None)
        if authorizer is None:
            return True
        by_type = getattr(authorizer, "authorize_by_type", None)
        if by_type is None:
            return False
        return bool(by_type(self.principal, self.client_host, operation, resource_type))

    @property
    def topics(self) -> TopicServiceApi:
        return self.broker.topic_service
