"""What the RocketMQ handlers need from the process (typing.Protocols), so protocols/ never
imports gateway/.  gateway/rocketmq/service.py provides the implementation.

This module must never hold behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from protocols.kafka.built_batch import BuiltBatch
from protocols.rocketmq.client_registry import ClientRegistry
from protocols.rocketmq.codec import RemotingCommand


class TopicInfoLike(Protocol):
    name: str
    partitions: int
    configs: dict[str, str]


class AppendResultLike(Protocol):
    base_offset: int


class PartitionLogLike(Protocol):
    log_start_offset: int
    high_watermark: int

    async def append(self, records: bytes) -> AppendResultLike: ...
    async def append_built(self, batch: BuiltBatch) -> AppendResultLike: ...
    async def read(self, offset: int, max_bytes: int) -> list[bytes]: ...
    async def wait_for_data(self, offset: int, timeout_s: float) -> None: ...
    async def offset_for_timestamp(self, ts_ms: int) -> tuple[int, int] | None: ...


class TopicServiceLike(Protocol):
    def topics(self) -> dict[str, TopicInfoLike]: ...  # type: ignore[misc]
    async def refresh_topic(self, name: str) -> TopicInfoLike | None: ...
    async def create_topic(self, name: str, partitions: int,
                           configs: dict[str, str] | None = None) -> None: ...
    async def create_partitions(self, name: str, total: int) -> None: ...
    async def delete_topic(self, name: str) -> None: ...
    async def partition(self, topic: str, partition: int) -> PartitionLogLike: ...


class ConnectionLike(Protocol):
    """One client connection as handlers see it."""

    peer: tuple[str, int]
    connection_id: int

    def send_request(self, command: RemotingCommand) -> bool:
        """Queue a broker-initiated request (oneway) on this connection; False if closed."""
        ...


@dataclass
class RocketMQBrokerConfig:
    broker_name: str = "ledgerwire-broker"
    cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    advertised_host: str = "127.0.0.1"
    advertised_port: int = 10911  # 0: the bound port, once known
    auto_create_topics: bool = True
    default_queue_nums: int = 4
    max_frame_bytes: int = 16 << 20
    max_header_bytes: int = 1 << 20
    long_polling_max_s: float = 15.0
    pull_max_bytes: int = 4 << 20
    pull_scan_limit: int = 2000  # records looked at per pull when tags filter most out
    max_reconsume_times: int = 16
    lock_expiry_s: float = 60.0
    client_expiry_s: float = 120.0
    delay_levels: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    transaction_check_timeout_s: float = 6.0  # age before an undecided half is checked back
    transaction_check_interval_s: float = 60.0
    transaction_max_checks: int = 15

    @property
    def broker_addr(self) -> str:
        return f"{self.advertised_host}:{self.advertised_port}"


class OffsetStoreLike(Protocol):
    def query(self, group: str, topic: str, queue_id: int) -> int | None: ...
    async def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...


class ListableOffsetsLike(Protocol):
    """An offset store that can also be listed (admin statistics; optional on a broker)."""

    def committed(self, group: str) -> dict[tuple[str, int], int]: ...
    def groups(self) -> list[str]: ...


class SubscriptionGroupStoreLike(Protocol):
    """Durable subscription-group configs (`broker.subscription_groups`; optional)."""

    def cached(self, group: str) -> dict[str, Any] | None: ...  # in memory (the pull path)
    async def get(self, group: str) -> dict[str, Any] | None: ...
    async def all(self) -> dict[str, dict[str, Any]]: ...
    async def put(self, group: str, config: dict[str, Any]) -> None: ...
    async def delete(self, group: str) -> bool: ...


class BrokerLike(Protocol):
    @property
    def config(self) -> RocketMQBrokerConfig: ...
    @property
    def topics(self) -> TopicServiceLike: ...
    @property
    def offsets(self) -> OffsetStoreLike: ...
    @property
    def clients(self) -> ClientRegistry: ...

    async def ensure_topic(self, topic: str, queue_nums: int, *,
                           explicit: bool = False) -> TopicInfoLike: ...
    def now_ms(self) -> int: ...
