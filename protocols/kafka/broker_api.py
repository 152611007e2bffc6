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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class AppendResultView(Protocol):
    """What a PartitionLog append reports back (gateway.partition_log.AppendResult)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def log_append_time_ms(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...


class PartitionLogApi(Protocol):
    """One partition's offset space (gateway.partition_log.PartitionLog)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    async def append(
        self, records: bytes | memoryview, *, timestamp_type_log_append: bool = False
    ) -> AppendResultView: ...

    async def read(self, offset: int, max_bytes: int) -> list[bytes]: ...

    async def wait_for_data(self, offset: int, timeout_s: float) -> None: ...

    async def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None: ...

    async def max_timestamp_offset(self) -> tuple[int, int] | None: ...


class TopicInfoView(Protocol):
    """A topic as the topic service describes it (gateway.topic_service.TopicInfo)."""

    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def partitions(self) -> int: ...

    @property
    def configs(self) -> Mapping[str, str]: ...


class TopicServiceApi(Protocol):
    """Topics and their partitions (gateway.topic_service.TopicService)."""

    async def create_topic(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> None: ...

    async def delete_topic(self, name: str) -> None: ...

    async def create_partitions(self, name: str, total: int) -> None: ...

    def topics(self) -> Mapping[str, Any]: ...  # name -> TopicInfoView

    async def partition(self, topic: str, partition: int) -> PartitionLogApi: ...

    async def allocate_producer_id(self) -> int: ...


class BrokerSettings(Protocol):
    """The broker identity and knobs the handlers read (gateway.kafka_broker.KafkaBrokerConfig)."""

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
    def retention_ms(self) -> int: ...

    @property
    def retention_bytes(self) -> int: ...

    @property
    def rack(self) -> str | None: ...


class BrokerApi(Protocol):
    """The broker as handlers see it (gateway.kafka_broker.KafkaBroker)."""

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

    def supported_api_versions(self) -> Mapping[int, tuple[int, int]]:
        """api key -> (min, max) version that this broker answers (what ApiVersions advertises)."""
        ...


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

    @property
    def topics(self) -> TopicServiceApi:
        return self.broker.topic_service
