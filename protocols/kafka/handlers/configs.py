"""DescribeConfigs (key 32): topic configs with their defaults, and the broker's own configs.

`TOPIC_CONFIGS` is the catalog of topic-level configs this broker knows: name, type and
default (Kafka's names and defaults; retention and message size defaults come from the broker
config).  A topic's explicit configs override the defaults and are reported as
DYNAMIC_TOPIC_CONFIG; the rest as DEFAULT_CONFIG.  CreateTopics uses the same catalog to
validate configs and to describe new topics (v5+).  Broker configs are read-only
STATIC_BROKER_CONFIG values that admin clients commonly ask for.

This module must never change a config: AlterConfigs is a separate API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocols.kafka.broker_api import BrokerSettings, RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import (
    ErrorCode,
    InvalidConfigError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from protocols.kafka.handlers.error_responses import error_code_of, error_message_of

# ConfigResource.Type
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# DescribeConfigsResponse.ConfigSource
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# ConfigDef.Type as DescribeConfigs v3+ reports it
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_SHORT = 1, 2, 3, 4
TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 5, 6, 7

LONG_MAX = str(2**63 - 1)

# name -> (type, default, documentation); None default = derived from the broker config
TOPIC_CONFIGS: dict[str, tuple[int, str | None, str]] = {
    "cleanup.policy": (TYPE_LIST, "delete", "Retention policy: delete (compact is not applied)."),
    "compression.type": (TYPE_STRING, "producer", "Batches are stored as the producer sent them."),
    "delete.retention.ms": (TYPE_LONG, "86400000", "Tombstone retention for compacted topics."),
    "file.delete.delay.ms": (TYPE_LONG, "60000", "Delay before a deleted ledger is removed."),
    "flush.messages": (TYPE_LONG, LONG_MAX, "Every append is fsynced by the ledger quorum."),
    "flush.ms": (TYPE_LONG, LONG_MAX, "Every append is fsynced by the ledger quorum."),
    "index.interval.bytes": (TYPE_INT, "4096", "Offset index granularity."),
    "max.compaction.lag.ms": (TYPE_LONG, LONG_MAX, "Maximum time a record stays uncompacted."),
    "max.message.bytes": (TYPE_INT, None, "Largest record batch size allowed."),
    "message.timestamp.type": (TYPE_STRING, "CreateTime", "CreateTime or LogAppendTime."),
    "message.timestamp.difference.max.ms": (TYPE_LONG, LONG_MAX, "Allowed timestamp skew."),
    "message.timestamp.before.max.ms": (TYPE_LONG, LONG_MAX, "Allowed past timestamp skew."),
    "message.timestamp.after.max.ms": (TYPE_LONG, LONG_MAX, "Allowed future timestamp skew."),
    "min.cleanable.dirty.ratio": (TYPE_DOUBLE, "0.5", "Compaction trigger ratio."),
    "min.compaction.lag.ms": (TYPE_LONG, "0", "Minimum time a record stays uncompacted."),
    "min.insync.replicas": (TYPE_INT, "1", "Replication is the ledger's ack quorum."),
    "preallocate": (TYPE_BOOLEAN, "false", "Not applicable to ledger storage."),
    "retention.bytes": (TYPE_LONG, None, "Size retention per partition, -1 for none."),
    "retention.ms": (TYPE_LONG, None, "Time retention, -1 for none."),
    "segment.bytes": (TYPE_INT, "1073741824", "Ledger roll-over size."),
    "segment.index.bytes": (TYPE_INT, "10485760", "Offset index size."),
    "segment.jitter.ms": (TYPE_LONG, "0", "Roll-over jitter."),
    "segment.ms": (TYPE_LONG, "604800000", "Ledger roll-over age."),
    "unclean.leader.election.enable": (TYPE_BOOLEAN, "false", "Never: fencing decides."),
    "message.downconversion.enable": (TYPE_BOOLEAN, "true", "Old fetch versions."),
    "remote.storage.enable": (TYPE_BOOLEAN, "false", "Tiered storage is not used."),
    "local.retention.ms": (TYPE_LONG, "-2", "Tiered storage is not used."),
    "local.retention.bytes": (TYPE_LONG, "-2", "Tiered storage is not used."),
    "leader.replication.throttled.replicas": (TYPE_LIST, "", "Not applicable."),
    "follower.replication.throttled.replicas": (TYPE_LIST, "", "Not applicable."),
}

_INTEGER_TYPES = (TYPE_INT, TYPE_SHORT, TYPE_LONG)


def topic_default(name: str, broker: BrokerSettings) -> str:
    kind, default, _doc = TOPIC_CONFIGS[name]
    if default is not None:
        return default
    if name == "max.message.bytes":
        return str(broker.max_message_bytes)
    if name == "retention.ms":
        return str(broker.retention_ms)
    if name == "retention.bytes":
        return str(broker.retention_bytes)
    raise KeyError(name)


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Known names with well-formed values only (InvalidConfigError otherwise)."""
    checked: dict[str, str] = {}
    for name, value in configs.items():
        if name not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
        if value is None:
            raise InvalidConfigError(f"Null value not supported for topic config {name}")
        kind = TOPIC_CONFIGS[name][0]
        try:
            if kind in _INTEGER_TYPES:
                int(value)
            elif kind == TYPE_DOUBLE:
                float(value)
            elif kind == TYPE_BOOLEAN and value.lower() not in ("true", "false"):
                raise ValueError(value)
        except ValueError:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}") from None
        if name == "message.timestamp.type" and value not in ("CreateTime", "LogAppendTime"):
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}")
        if name == "cleanup.policy" and not set(value.split(",")) <= {"delete", "compact"}:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}")
        checked[name] = value
    return checked


def topic_config_values(
    explicit: Mapping[str, str], broker: BrokerSettings
) -> list[tuple[str, str, int, int, str]]:
    """(name, value, source, type, documentation) for every topic config, sorted by name."""
    out = []
    for name in sorted(TOPIC_CONFIGS):
        kind, _default, doc = TOPIC_CONFIGS[name]
        if name in explicit:
            out.append((name, explicit[name], SOURCE_DYNAMIC_TOPIC, kind, doc))
        else:
            out.append((name, topic_default(name, broker), SOURCE_DEFAULT, kind, doc))
    return out


def broker_config_values(ctx: RequestContext) -> list[tuple[str, str, int, int, str]]:
    c = ctx.broker.config
    values: list[tuple[str, str, int, str]] = [
        ("advertised.listeners",
         f"PLAINTEXT://{ctx.broker.advertised_host}:{ctx.broker.advertised_port}", TYPE_STRING,
         "Where clients reach this broker."),
        ("auto.create.topics.enable", str(c.auto_create_topics).lower(), TYPE_BOOLEAN,
         "Metadata requests create unknown topics."),
        ("broker.id", str(c.broker_id), TYPE_INT, "This broker's node id."),
        ("cluster.id", c.cluster_id, TYPE_STRING, "The cluster id."),
        ("compression.type", "producer", TYPE_STRING, "Batches are stored as sent."),
        ("default.replication.factor", "1", TYPE_INT, "Replication is done by the ledger store."),
        ("delete.topic.enable", "true", TYPE_BOOLEAN, "DeleteTopics is allowed."),
        ("log.cleanup.policy", "delete", TYPE_LIST, "Default cleanup policy."),
        ("log.message.timestamp.type", "CreateTime", TYPE_STRING, "Default timestamp type."),
        ("log.retention.bytes", str(c.retention_bytes), TYPE_LONG,
         "Default size retention."),
        ("log.retention.ms", str(c.retention_ms), TYPE_LONG,
         "Default time retention."),
        ("log.segment.bytes", "1073741824", TYPE_INT, "Ledger roll-over size."),
        ("message.max.bytes", str(c.max_message_bytes), TYPE_INT, "Largest batch allowed."),
        ("min.insync.replicas", "1", TYPE_INT, "The ledger ack quorum decides durability."),
        ("num.partitions", str(c.default_partitions), TYPE_INT, "Default partition count."),
        ("offsets.topic.replication.factor", "1", TYPE_SHORT, "Replication is in the ledgers."),
        ("transaction.state.log.replication.factor", "1", TYPE_SHORT, "As above."),
    ]
    return [(n, v, SOURCE_STATIC_BROKER, t, d) for n, v, t, d in values]


def _config_entry(version: int, name: str, value: str, source: int, kind: int, doc: str,
                  read_only: bool, synonyms: bool, documentation: bool) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "is_default": source == SOURCE_DEFAULT,
        "config_source": source,
        "is_sensitive": False,
        "synonyms": [{"name": name, "value": value, "source": source}] if synonyms else [],
        "config_type": kind,
        "documentation": doc if documentation else None,
    }


async def handle_describe_configs(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    version = header.api_version
    synonyms = bool(body.get("include_synonyms", False))
    documentation = bool(body.get("include_documentation", False))
    results = []
    for resource in body.get("resources") or []:
        rtype = int(resource.get("resource_type", 0))
        rname = resource.get("resource_name", "")
        keys = resource.get("configuration_keys")
        result: dict[str, Any] = {"error_code": 0, "error_message": None,
                                  "resource_type": rtype, "resource_name": rname, "configs": []}
        try:
            if rtype == RESOURCE_TOPIC:
                info = ctx.topics.topics().get(rname)
                if info is None:
                    raise UnknownTopicOrPartitionError(f"Topic {rname} does not exist")
                values = topic_config_values(dict(info.configs), ctx.broker.config)
                read_only = False
            elif rtype == RESOURCE_BROKER:
                if rname not in ("", str(ctx.broker.config.broker_id)):
                    raise InvalidRequestError(f"Unexpected broker id {rname}")
                values = broker_config_values(ctx)
                read_only = True
            elif rtype == RESOURCE_BROKER_LOGGER:
                values, read_only = [], True
            else:
                raise InvalidRequestError(f"Unsupported resource type {rtype}")
            wanted = None if keys is None else set(keys)
            result["configs"] = [
                _config_entry(version, n, v, s, t, d, read_only, synonyms, documentation)
                for n, v, s, t, d in values
                if wanted is None or n in wanted
            ]
        except Exception as exc:  # noqa: BLE001 - becomes this resource's error code
            code = error_code_of(exc)
            result["error_code"] = code
            result["error_message"] = error_message_of(exc)
            if code == ErrorCode.UNKNOWN_SERVER_ERROR:
                result["error_message"] = None
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}
