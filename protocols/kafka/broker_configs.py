"""Dynamic broker configs: which broker configs may change at run time, and what they mean.

Kafka lets `kafka-configs.sh --entity-type brokers [--entity-default]` (AlterConfigs /
IncrementalAlterConfigs on a BROKER resource) change some broker configs without a restart:
per broker (resource name = the broker id, source DYNAMIC_BROKER_CONFIG) or for every broker
(resource name "", source DYNAMIC_DEFAULT_BROKER_CONFIG).  The ones this broker honours are the
defaults of topic configs (`DYNAMIC_BROKER_CONFIGS`: broker name -> the topic config it is the
default of, Kafka's synonyms): retention, message size, cleanup policy, the log cleaner's
compaction defaults, segment roll-over and the timestamp rules.  A topic's own setting still
wins; a namespace policy sits between the topic and these defaults for retention.

`DynamicBrokerConfigs` is the stored state (a cluster default and per-broker overrides) and
its resolution: `effective(broker_id)` (broker name -> value, source) and `topic_defaults`
(topic name -> value, source) for one broker; the handlers (handlers/configs.py) check names
and values with the topic catalog's rules.  This module must never do I/O: the gateway stores
and watches the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3

DYNAMIC_BROKER_CONFIGS: dict[str, str] = {
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
}
RECORD_FORMAT = 1



@dataclass(frozen=True)
class DynamicBrokerConfigs:
    """The cluster default ("") and per-broker (str id) dynamic configs, by broker name."""

    default: Mapping[str, str] = field(default_factory=dict)
    brokers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def scope(self, resource_name: str) -> dict[str, str]:
        return dict(self.default if resource_name == "" else self.brokers.get(resource_name, {}))

    def with_scope(self, resource_name: str, configs: Mapping[str, str]) -> DynamicBrokerConfigs:
        if resource_name == "":
            return DynamicBrokerConfigs(dict(configs), self.brokers)
        brokers = {k: dict(v) for k, v in self.brokers.items()}
        if configs:
            brokers[resource_name] = dict(configs)
        else:
            brokers.pop(resource_name, None)
        return DynamicBrokerConfigs(self.default, brokers)

    def effective(self, broker_id: int) -> dict[str, tuple[str, int]]:
        """broker config name -> (value, source) for `broker_id` (its own over the default)."""
        out = {n: (v, SOURCE_DYNAMIC_DEFAULT_BROKER) for n, v in self.default.items()}
        out.update((n, (v, SOURCE_DYNAMIC_BROKER))
                   for n, v in self.brokers.get(str(broker_id), {}).items())
        return out

    def topic_defaults(self, broker_id: int) -> dict[str, tuple[str, int]]:
        """topic config name -> (default value, source) that these configs give topics."""
        return {DYNAMIC_BROKER_CONFIGS[n]: vs for n, vs in self.effective(broker_id).items()
                if n in DYNAMIC_BROKER_CONFIGS}

    def to_record(self) -> dict[str, Any]:
        return {"format": RECORD_FORMAT, "default": dict(self.default),
                "brokers": {k: dict(v) for k, v in self.brokers.items()}}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> DynamicBrokerConfigs:
        if record.get("format") != RECORD_FORMAT:
            raise ValueError(f"dynamic broker configs of unknown format {record.get('format')!r}")
        return cls({str(k): str(v) for k, v in dict(record.get("default", {})).items()},
                   {str(b): {str(k): str(v) for k, v in dict(c).items()}
                    for b, c in dict(record.get("brokers", {})).items()})
