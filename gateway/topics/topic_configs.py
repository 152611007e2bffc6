"""What a topic's configs are and what they mean for its partitions.

`TopicServiceConfig` holds the broker's defaults; `validate_topic_configs` refuses topic config
values the partitions could not run with (before they are written to the topic node);
`partition_configs` works out the managed-ledger and partition-log configs a partition runs
with: the topic's own configs over the dynamic broker defaults, with a namespace's policies
(ensemble and quorums, retention) between the two, and cleanup.policy / segment.* mapped onto
retention and ledger rollover.  Nothing here reads or writes the metadata store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.settings import OffloadConfig, RetentionConfig
from gateway.topics.compactor import CompactionSettings, ledger_age_limit_s
from gateway.topics.partition_log_config import PartitionLogConfig
from ledger_backend.managed_ledger.types import ManagedLedgerConfig
from protocols.kafka.errors import InvalidConfigError

_INT_CONFIGS = ("retention.ms", "retention.bytes", "max.message.bytes", "segment.bytes",
                "segment.ms", "min.insync.replicas", "message.timestamp.difference.max.ms",
                "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
                "local.retention.ms", "local.retention.bytes", "offload.deletion.lag.ms")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass
class TopicServiceConfig:
    default_partitions: int = 1
    auto_create_topics: bool = True
    retention_ms: int = RetentionConfig.retention_ms  # -1 = keep forever
    retention_bytes: int = RetentionConfig.retention_bytes
    max_message_bytes: int = 1048588
    tail_cache_bytes: int = 16 << 20  # per open partition
    # how a partition's managed ledger writes and rolls over: ManagedLedgerConfig's defaults
    ensemble_size: int = ManagedLedgerConfig.ensemble_size
    write_quorum: int = ManagedLedgerConfig.write_quorum
    ack_quorum: int = ManagedLedgerConfig.ack_quorum
    max_entries_per_ledger: int = ManagedLedgerConfig.max_entries_per_ledger
    max_ledger_bytes: int = ManagedLedgerConfig.max_ledger_bytes
    max_ledger_age_s: float = ManagedLedgerConfig.max_ledger_age_s
    snapshot_interval_batches: int = 1000
    namespace: str = "public/default"
    compaction_interval_s: float = 30.0  # background compaction passes (compacted topics)
    compaction_max_bytes_per_s: float | None = 64 << 20  # read pace of a pass
    # background offload: thresholds, deletion lag and pass interval ([offload])
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    idle_unload_s: float = 600.0  # a partition log unused this long is closed; <= 0: never
    max_open_partitions: int = 0  # open partition logs at most (LRU idle ones close); 0: no bound


def validate_topic_configs(configs: dict[str, str]) -> None:
    for key in _INT_CONFIGS:
        if key in configs:
            try:
                int(configs[key])
            except (TypeError, ValueError) as exc:
                raise InvalidConfigError(f"{key}={configs[key]!r} is not an integer") from exc
    ratio = configs.get("min.cleanable.dirty.ratio")
    if ratio is not None:
        try:
            ok = 0.0 <= float(ratio) <= 1.0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise InvalidConfigError(f"min.cleanable.dirty.ratio={ratio!r} is not in [0, 1]")
    ts_type = configs.get("message.timestamp.type")
    if ts_type is not None and ts_type not in _TIMESTAMP_TYPES:
        raise InvalidConfigError(f"message.timestamp.type must be one of {_TIMESTAMP_TYPES}")


def partition_configs(
    topic: str, configs: dict[str, str], config: TopicServiceConfig,
    broker_defaults: Mapping[str, str], namespaces: Any,
) -> tuple[ManagedLedgerConfig, PartitionLogConfig]:
    """The managed-ledger and partition-log configs a partition of `topic` runs with: `configs`
    are its effective configs (TopicService.effective_configs), `broker_defaults` the dynamic
    broker configs, `namespaces` a NamespaceRegistry or None."""
    e, qw, qa = config.ensemble_size, config.write_quorum, config.ack_quorum
    default_ms = int(broker_defaults.get("retention.ms", config.retention_ms))
    default_bytes = int(broker_defaults.get("retention.bytes", config.retention_bytes))
    if namespaces is not None:  # namespace policies sit between broker and topic
        pol = namespaces.topic_policies(topic)
        e = pol.ensemble_size or e
        qw = min(pol.write_quorum or qw, e)
        qa = min(pol.ack_quorum or qa, qw)
        # 0 is Pulsar's "no retention": consumed data goes
        # (gateway/topics/retention_policies.py),
        # so the ledger itself has no time/size bound then; -1 keeps everything.
        if pol.retention_time_minutes is not None:
            default_ms = pol.retention_time_minutes * 60_000 \
                if pol.retention_time_minutes > 0 else -1
        if pol.retention_size_mb is not None:
            default_bytes = pol.retention_size_mb << 20 if pol.retention_size_mb > 0 else -1
    retention_ms = int(configs.get("retention.ms", default_ms))
    retention_bytes = int(configs.get("retention.bytes", default_bytes))
    compaction = CompactionSettings.from_configs(configs)
    if not compaction.delete:  # cleanup.policy=compact: nothing goes by age or size
        retention_ms = retention_bytes = -1
    segment_bytes = configs.get("segment.bytes")
    segment_ms = configs.get("segment.ms")
    segment_age_s = max(0.001, int(segment_ms) / 1000) if segment_ms is not None \
        else config.max_ledger_age_s
    ml_config = ManagedLedgerConfig(
        ensemble_size=e,
        write_quorum=qw,
        ack_quorum=qa,
        max_entries_per_ledger=config.max_entries_per_ledger,
        max_ledger_bytes=max(1, int(segment_bytes)) if segment_bytes is not None
        else config.max_ledger_bytes,
        max_ledger_age_s=ledger_age_limit_s(compaction, segment_age_s),
        retention_time_s=retention_ms / 1000 if retention_ms >= 0 else None,
        retention_bytes=retention_bytes if retention_bytes >= 0 else None,
    )
    diff = configs.get("message.timestamp.difference.max.ms")
    plog_config = PartitionLogConfig(
        max_message_bytes=int(configs.get("max.message.bytes", config.max_message_bytes)),
        log_append_time=configs.get("message.timestamp.type") == "LogAppendTime",
        tail_cache_bytes=config.tail_cache_bytes,
        snapshot_interval_batches=config.snapshot_interval_batches,
        max_timestamp_diff_ms=int(diff) if diff is not None else None,
        compacted=compaction.compact,
    )
    return ml_config, plog_config
