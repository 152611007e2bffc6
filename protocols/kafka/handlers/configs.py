"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44): topic configs (and
group configs, through handlers/share_configs.py).

`TOPIC_CONFIGS` is the catalog of topic-level configs this broker knows: name, type and
default (Kafka's names and defaults; retention and message size defaults come from the broker
config).  A topic's explicit configs override the defaults and are reported as
DYNAMIC_TOPIC_CONFIG; the rest as DEFAULT_CONFIG.  CreateTopics uses the same catalog to
validate configs and to describe new topics (v5+).  Broker configs are STATIC_BROKER_CONFIG
values that admin clients commonly ask for, except the dynamic ones
(protocols.kafka.broker_configs): those may be altered on a BROKER resource, for every broker
(resource name "", DYNAMIC_DEFAULT_BROKER_CONFIG) or one (its id, DYNAMIC_BROKER_CONFIG), are
stored by the broker's `dynamic_configs` store (shared by a cluster's brokers, applied without
a restart), and are the defaults topics report (with those sources) unless they set their own.

AlterConfigs replaces a topic's explicit configs with the given set (Kafka's legacy semantics);
IncrementalAlterConfigs applies SET / DELETE / APPEND / SUBTRACT per name.  Both go through
`TopicService.alter_topic_configs` (CAS on the topic node, then applied to the open partitions),
refuse unknown names and bad values with INVALID_CONFIG, and with `validate_only` change
nothing; a static broker config is INVALID_REQUEST, as in Kafka.  Each resource is
authorised on its own (ALTER_CONFIGS / DESCRIBE_CONFIGS on the topic, or on the cluster for
broker resources).

This module must never change a config without going through the topic service.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from protocols.kafka.acl_model import (
    CLUSTER_NAME,
    OP_ALTER_CONFIGS,
    OP_DESCRIBE_CONFIGS,
    RES_CLUSTER,
    RES_GROUP,
    RES_TOPIC,
)
from protocols.kafka.broker_api import BrokerSettings, RequestContext
from protocols.kafka.broker_configs import (
    DYNAMIC_BROKER_CONFIGS,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    DynamicBrokerConfigs,
)
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    GroupAuthorizationFailedError,
    InvalidConfigError,
    InvalidRequestError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from protocols.kafka.handlers.error_responses import error_code_of, error_message_of
from protocols.kafka.handlers.share_configs import alter_group_configs, group_config_values

# ConfigResource.Type
RESOURCE_TOPIC = 2
RESOURCE_GROUP = 32
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# DescribeConfigsResponse.ConfigSource
SOURCE_DYNAMIC_TOPIC = 1  # (2 and 3, the dynamic broker sources, are broker_configs')
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# ConfigDef.Type as DescribeConfigs v3+ reports it
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_SHORT = 1, 2, 3, 4
TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 5, 6, 7

LONG_MAX = str(2**63 - 1)

# name -> (type, default, documentation); None default = derived from the broker config
TOPIC_CONFIGS: dict[str, tuple[int, str | None, str]] = {
    "bookkeeper.ensemble.size": (TYPE_INT, None, "Bookies a ledger of this topic is striped over."),
    "bookkeeper.write.quorum": (TYPE_INT, None, "Copies written of each entry."),
    "bookkeeper.ack.quorum": (TYPE_INT, None, "Copies acknowledged before an append is."),
    "cleanup.policy": (TYPE_LIST, "delete", "delete, compact, or compact,delete."),
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
    "remote.storage.enable": (TYPE_BOOLEAN, "false", "Offload closed ledgers to tiered "
                              "storage ([offload]); explicit false: never, whatever the "
                              "namespace policy."),
    "local.retention.ms": (TYPE_LONG, "-2", "Offload ledgers older than this; -1 never by "
                           "age, -2 the namespace's or [offload]'s threshold."),
    "local.retention.bytes": (TYPE_LONG, "-2", "Keep at most this much per partition on "
                              "bookies; -1 no bound, -2 the namespace's or [offload]'s."),
    "offload.deletion.lag.ms": (TYPE_LONG, "-2", "Delete the bookie copy of an offloaded "
                                "ledger this long after its object was verified; -1 keep it, "
                                "-2 the namespace's or [offload]'s deletion lag."),
    "leader.replication.throttled.replicas": (TYPE_LIST, "", "Not applicable."),
    "follower.replication.throttled.replicas": (TYPE_LIST, "", "Not applicable."),
}

_INTEGER_TYPES = (TYPE_INT, TYPE_SHORT, TYPE_LONG)
# Lower bounds of the configs that take effect here (Kafka's: -1 means "no limit").
_MINIMUMS = {"retention.ms": -1, "retention.bytes": -1, "max.message.bytes": 0,
             "local.retention.ms": -2, "local.retention.bytes": -2,
             "offload.deletion.lag.ms": -2,
             "segment.bytes": 1, "segment.ms": 1, "message.timestamp.difference.max.ms": 0}


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
    if name.startswith("bookkeeper."):
        return "-1"  # unset: the namespace's, else the broker's storage default applies
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
        low = _MINIMUMS.get(name)
        if low is not None and int(value) < low:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}: "
                                     f"value must be at least {low}")
        if name == "message.timestamp.type" and value not in ("CreateTime", "LogAppendTime"):
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}")
        if name == "cleanup.policy" and not set(value.split(",")) <= {"delete", "compact"}:
            raise InvalidConfigError(f"Invalid value {value} for configuration {name}")
        checked[name] = value
    return checked


def dynamic_state(ctx: RequestContext) -> DynamicBrokerConfigs:
    """The dynamic broker configs this broker follows (none without a store)."""
    store = getattr(ctx.broker, "dynamic_configs", None)
    return store.current if store is not None else DynamicBrokerConfigs()


def topic_config_values(
    explicit: Mapping[str, str], broker: BrokerSettings,
    dynamic: Mapping[str, tuple[str, int]] | None = None,
) -> list[tuple[str, str, int, int, str]]:
    """(name, value, source, type, documentation) for every topic config, sorted by name;
    `dynamic` is topic name -> (value, source) from dynamic broker configs."""
    out = []
    for name in sorted(TOPIC_CONFIGS):
        kind, _default, doc = TOPIC_CONFIGS[name]
        if name in explicit:
            out.append((name, explicit[name], SOURCE_DYNAMIC_TOPIC, kind, doc))
        elif dynamic and name in dynamic:
            value, source = dynamic[name]
            out.append((name, value, source, kind, doc))
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
    static = {n: (v, t, d) for n, v, t, d in values}
    for broker_name, topic_name in DYNAMIC_BROKER_CONFIGS.items():
        if broker_name not in static:
            kind, _default, doc = TOPIC_CONFIGS[topic_name]
            static[broker_name] = (topic_default(topic_name, c), kind, doc)
    dynamic = dynamic_state(ctx).effective(c.broker_id)
    out = []
    for name in sorted(static):
        value, kind, doc = static[name]
        if name in dynamic:
            value, source = dynamic[name]
            out.append((name, value, source, kind, doc))
        else:
            out.append((name, value, SOURCE_STATIC_BROKER, kind, doc))
    return out


def _broker_resource(ctx: RequestContext, rname: str) -> None:
    """"" (every broker) or a broker id; this broker's own id when describing."""
    if rname != "" and not rname.isdigit():
        raise InvalidRequestError(f"Unexpected broker id {rname}")


def _config_entry(version: int, name: str, value: str, source: int, kind: int, doc: str,
                  read_only: bool, synonyms: bool, documentation: bool) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "is_default": source in (SOURCE_DEFAULT, SOURCE_STATIC_BROKER),
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
            _authorize_resource(ctx, OP_DESCRIBE_CONFIGS, rtype, rname)
            if rtype == RESOURCE_TOPIC:
                info = ctx.topics.topics().get(rname)
                if info is None:
                    raise UnknownTopicOrPartitionError(f"Topic {rname} does not exist")
                values = topic_config_values(
                    dict(info.configs), ctx.broker.config,
                    dynamic_state(ctx).topic_defaults(ctx.broker.config.broker_id))
                read_only = False
            elif rtype == RESOURCE_BROKER:
                _broker_resource(ctx, rname)
                if rname == "":  # the cluster default resource: its dynamic configs only
                    state = dynamic_state(ctx)
                    values = [(n, v, SOURCE_DYNAMIC_DEFAULT_BROKER,
                               TOPIC_CONFIGS[DYNAMIC_BROKER_CONFIGS[n]][0], "")
                              for n, v in sorted(state.default.items())]
                elif rname != str(ctx.broker.config.broker_id):
                    raise InvalidRequestError(f"Unexpected broker id {rname}")
                else:
                    values = broker_config_values(ctx)
                read_only = True
            elif rtype == RESOURCE_BROKER_LOGGER:
                values, read_only = [], True
            elif rtype == RESOURCE_GROUP:
                values, read_only = await group_config_values(ctx, rname), False
            else:
                raise InvalidRequestError(f"Unsupported resource type {rtype}")
            wanted = None if keys is None else set(keys)
            result["configs"] = [
                _config_entry(version, n, v, s, t, d,
                              read_only and n not in DYNAMIC_BROKER_CONFIGS, synonyms,
                              documentation)
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


# IncrementalAlterConfigs ConfigOperation
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

ConfigUpdate = Callable[[Mapping[str, str]], dict[str, str]]


def _authorize_resource(ctx: RequestContext, operation: int, rtype: int, rname: str) -> None:
    if rtype == RESOURCE_TOPIC:
        if not ctx.authorize(operation, RES_TOPIC, rname):
            raise TopicAuthorizationFailedError(f"not authorized to access topic {rname}")
    elif rtype in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        if not ctx.authorize(operation, RES_CLUSTER, CLUSTER_NAME):
            raise ClusterAuthorizationFailedError("not authorized to access the cluster")
    elif rtype == RESOURCE_GROUP:
        if not ctx.authorize(operation, RES_GROUP, rname):
            raise GroupAuthorizationFailedError(f"not authorized to access group {rname}")


_STATIC_BROKER_NAMES = {"advertised.listeners", "auto.create.topics.enable", "broker.id",
                        "cluster.id", "compression.type", "default.replication.factor",
                        "delete.topic.enable", "min.insync.replicas", "num.partitions",
                        "offsets.topic.replication.factor",
                        "transaction.state.log.replication.factor"}


def validate_broker_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Dynamic broker configs with well-formed values (the topic catalog's rules); a static
    broker config is INVALID_REQUEST (Kafka: "Cannot update these configs dynamically")."""
    checked: dict[str, str] = {}
    for name, value in configs.items():
        topic_name = DYNAMIC_BROKER_CONFIGS.get(name)
        if topic_name is None:
            if name in _STATIC_BROKER_NAMES:
                raise InvalidRequestError(f"Cannot update these configs dynamically: [{name}]")
            raise InvalidConfigError(f"Unknown broker config name: {name}")
        if value is None:
            raise InvalidConfigError(f"Null value not supported for broker config {name}")
        validate_topic_configs({topic_name: value})
        checked[name] = value
    return checked


def _kind_of(name: str, broker: bool) -> int:
    if broker:
        topic_name = DYNAMIC_BROKER_CONFIGS.get(name)
        if topic_name is None:
            validate_broker_configs({name: ""})  # raises the right error for the name
            raise InvalidConfigError(f"Unknown broker config name: {name}")
        return TOPIC_CONFIGS[topic_name][0]
    if name not in TOPIC_CONFIGS:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    return TOPIC_CONFIGS[name][0]


def _replace_all(entries: list[dict], broker: bool = False) -> ConfigUpdate:
    names = Counter(e.get("name") for e in entries)
    duplicates = [n for n, c in names.items() if c > 1]
    if duplicates:
        raise InvalidRequestError(f"duplicate config keys: {sorted(map(str, duplicates))}")
    check = validate_broker_configs if broker else validate_topic_configs
    wanted = check({str(e.get("name")): e.get("value") for e in entries})
    return lambda _current: dict(wanted)


def _incremental(entries: list[dict], broker: bool = False) -> ConfigUpdate:
    names = Counter(e.get("name") for e in entries)
    duplicates = [n for n, c in names.items() if c > 1]
    if duplicates:
        raise InvalidRequestError(f"duplicate config keys: {sorted(map(str, duplicates))}")
    for e in entries:
        name, op = e.get("name"), int(e.get("config_operation", OP_SET))
        kind = _kind_of(str(name), broker)
        if op not in (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT):
            raise InvalidRequestError(f"unknown config operation {op} for {name}")
        if op in (OP_APPEND, OP_SUBTRACT) and kind != TYPE_LIST:
            raise InvalidConfigError(f"Config value append is not allowed for config key: {name}")
        if op != OP_DELETE and e.get("value") is None:
            raise InvalidConfigError(f"Null value not supported for topic config {name}")

    def update(current: Mapping[str, str]) -> dict[str, str]:
        configs = dict(current)
        for e in entries:
            name, op, value = e["name"], int(e.get("config_operation", OP_SET)), e.get("value")
            if op == OP_SET:
                configs[name] = str(value)
            elif op == OP_DELETE:
                configs.pop(name, None)
            else:
                items = [v for v in configs.get(name, "").split(",") if v]
                given = [v for v in (value or "").split(",") if v]
                if op == OP_APPEND:
                    items += [v for v in given if v not in items]
                else:
                    items = [v for v in items if v not in given]
                configs[name] = ",".join(items)
        return validate_broker_configs(configs) if broker else validate_topic_configs(configs)

    return update


async def _alter_broker(ctx: RequestContext, rname: str, update: ConfigUpdate,
                        validate_only: bool) -> None:
    _broker_resource(ctx, rname)
    store = getattr(ctx.broker, "dynamic_configs", None)
    if store is None:
        raise InvalidRequestError("this broker keeps no dynamic configs")
    if validate_only:
        update(dynamic_state(ctx).scope(rname))
        return
    await store.alter(lambda state: state.with_scope(rname, update(state.scope(rname))))


async def _alter_resources(ctx: RequestContext, body: dict,
                           make_update: Callable[[list[dict], bool], ConfigUpdate]) -> dict:
    validate_only = bool(body.get("validate_only", False))
    resources = body.get("resources") or []
    counts = Counter((int(r.get("resource_type", 0)), r.get("resource_name")) for r in resources)
    responses = []
    for resource in resources:
        rtype = int(resource.get("resource_type", 0))
        rname = resource.get("resource_name") or ""
        out: dict[str, Any] = {"error_code": 0, "error_message": None,
                               "resource_type": rtype, "resource_name": rname}
        try:
            if counts[(rtype, rname)] > 1:
                raise InvalidRequestError(f"resource {rname} appears more than once")
            _authorize_resource(ctx, OP_ALTER_CONFIGS, rtype, rname)
            if rtype == RESOURCE_BROKER:
                update = make_update(list(resource.get("configs") or []), True)
                await _alter_broker(ctx, rname, update, validate_only)
                responses.append(out)
                continue
            if rtype == RESOURCE_BROKER_LOGGER:
                raise InvalidConfigError("broker log levels are set in the broker's "
                                         "configuration (--log-level)")
            if rtype == RESOURCE_GROUP:
                await alter_group_configs(ctx, rname, list(resource.get("configs") or []),
                                          incremental=make_update is _incremental,
                                          validate_only=validate_only)
                responses.append(out)
                continue
            if rtype != RESOURCE_TOPIC:
                raise InvalidRequestError(f"Unsupported resource type {rtype}")
            if rname not in ctx.topics.topics():
                raise UnknownTopicOrPartitionError(f"Topic {rname} does not exist")
            update = make_update(list(resource.get("configs") or []), False)
            await ctx.topics.alter_topic_configs(rname, update, validate_only=validate_only)
        except Exception as exc:  # noqa: BLE001 - becomes this resource's error code
            out["error_code"] = error_code_of(exc)
            out["error_message"] = error_message_of(exc)
        responses.append(out)
    return {"throttle_time_ms": 0, "responses": responses}


async def handle_alter_configs(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    return await _alter_resources(ctx, body, _replace_all)


async def handle_incremental_alter_configs(ctx: RequestContext, header: RequestHeader,
                                           body: dict) -> dict:
    return await _alter_resources(ctx, body, _incremental)
