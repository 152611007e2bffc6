"""The declarative Kafka schema table: `SCHEMAS` maps an API key to its `ApiSchema`.

One module per API family holds the entries (plain data, generated from Apache Kafka's JSON
specs by scripts/gen_kafka_schema.py); `headers` holds the request/response headers.  Nothing
here encodes or decodes: protocols/kafka/codec.py compiles the table.

Old versions: Kafka 4.0 (KIP-896) removed many old versions from its specs, but clients still
send them (Produce v0-2, ListOffsets v0, OffsetFetch v0/v1, Metadata v0-6, ...).  The
reference specs this table comes from (../shared/reference/kafka-message-specs) still list
every version from 0 with its field layout, so no layout had to be restored by hand; each old
layout is also checked byte for byte against kafka-python's hand-written legacy classes
(tests/kafka_codec/test_kafka_codec_golden_legacy.py).
"""

from __future__ import annotations

from types import MappingProxyType

from . import (
    acls,
    api_versions,
    client_quotas,
    configs,
    consumer_groups,
    delegation_tokens,
    fetch,
    group_offsets,
    groups,
    leaders,
    list_offsets,
    log_dirs,
    metadata,
    produce,
    sasl,
    scram_credentials,
    share_groups,
    topics_admin,
    transactions,
    transactions_admin,
)
from .model import MISSING, ApiSchema, Field, VersionRange, parse_versions, snake_case

_ALL: tuple[ApiSchema, ...] = (
    produce.PRODUCE,
    fetch.FETCH,
    list_offsets.LIST_OFFSETS,
    metadata.METADATA,
    group_offsets.OFFSET_COMMIT,
    group_offsets.OFFSET_FETCH,
    groups.FIND_COORDINATOR,
    groups.JOIN_GROUP,
    groups.HEARTBEAT,
    groups.LEAVE_GROUP,
    groups.SYNC_GROUP,
    groups.DESCRIBE_GROUPS,
    groups.LIST_GROUPS,
    sasl.SASL_HANDSHAKE,
    api_versions.API_VERSIONS,
    topics_admin.CREATE_TOPICS,
    topics_admin.DELETE_TOPICS,
    topics_admin.DELETE_RECORDS,
    transactions.INIT_PRODUCER_ID,
    list_offsets.OFFSET_FOR_LEADER_EPOCH,
    transactions.ADD_PARTITIONS_TO_TXN,
    transactions.ADD_OFFSETS_TO_TXN,
    transactions.END_TXN,
    transactions.WRITE_TXN_MARKERS,
    transactions.TXN_OFFSET_COMMIT,
    acls.DESCRIBE_ACLS,
    acls.CREATE_ACLS,
    acls.DELETE_ACLS,
    configs.DESCRIBE_CONFIGS,
    configs.ALTER_CONFIGS,
    log_dirs.DESCRIBE_LOG_DIRS,
    sasl.SASL_AUTHENTICATE,
    topics_admin.CREATE_PARTITIONS,
    groups.DELETE_GROUPS,
    configs.INCREMENTAL_ALTER_CONFIGS,
    group_offsets.OFFSET_DELETE,
    metadata.DESCRIBE_CLUSTER,
    transactions.DESCRIBE_PRODUCERS,
    consumer_groups.CONSUMER_GROUP_HEARTBEAT,
    consumer_groups.CONSUMER_GROUP_DESCRIBE,
    share_groups.SHARE_GROUP_HEARTBEAT,
    share_groups.SHARE_GROUP_DESCRIBE,
    share_groups.SHARE_FETCH,
    share_groups.SHARE_ACKNOWLEDGE,
    share_groups.DESCRIBE_SHARE_GROUP_OFFSETS,
    share_groups.ALTER_SHARE_GROUP_OFFSETS,
    share_groups.DELETE_SHARE_GROUP_OFFSETS,
    leaders.ELECT_LEADERS,
    scram_credentials.DESCRIBE_USER_SCRAM_CREDENTIALS,
    scram_credentials.ALTER_USER_SCRAM_CREDENTIALS,
    client_quotas.DESCRIBE_CLIENT_QUOTAS,
    client_quotas.ALTER_CLIENT_QUOTAS,
    transactions_admin.DESCRIBE_TRANSACTIONS,
    transactions_admin.LIST_TRANSACTIONS,
    delegation_tokens.CREATE_DELEGATION_TOKEN,
    delegation_tokens.RENEW_DELEGATION_TOKEN,
    delegation_tokens.EXPIRE_DELEGATION_TOKEN,
    delegation_tokens.DESCRIBE_DELEGATION_TOKEN,
)

SCHEMAS: MappingProxyType[int, ApiSchema] = MappingProxyType(
    {schema.api_key: schema for schema in sorted(_ALL, key=lambda s: s.api_key)}
)
SCHEMAS_BY_NAME: MappingProxyType[str, ApiSchema] = MappingProxyType(
    {schema.name: schema for schema in _ALL}
)

__all__ = [
    "MISSING",
    "SCHEMAS",
    "SCHEMAS_BY_NAME",
    "ApiSchema",
    "Field",
    "VersionRange",
    "parse_versions",
    "snake_case",
]
