"""The dispatch table: API key -> the handler and the versions it implements.

A handler is `async def handle_<api>(ctx, header, body) -> dict` (the response body, snake_case
keys as the codec expects).  Handlers report per-topic/partition failures in their answers; any
exception that escapes a handler is turned into a whole-request error response by the broker,
through `error_responses.whole_request_error` (the one place exceptions become responses).

The version ranges here are what each handler implements; the broker intersects them with the
codec's schema table and advertises the result in ApiVersions, and nothing else.  Specs marked
`needs_group_coordinator` are served and advertised only when the broker was given a group
coordinator, `needs_transaction_coordinator` only with a transaction coordinator,
`needs_share_groups` only with share groups.  Requests
of one connection run concurrently under Kafka's ordering rules (`request_order`).

This module must never import gateway/ or do I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.handlers import transactions as txn
from protocols.kafka.handlers.acls import (
    handle_create_acls,
    handle_delete_acls,
    handle_describe_acls,
)
from protocols.kafka.handlers.admin import (
    handle_delete_records,
    handle_describe_cluster,
    handle_describe_producers,
)
from protocols.kafka.handlers.api_versions import handle_api_versions
from protocols.kafka.handlers.client_quotas import (
    handle_alter_client_quotas,
    handle_describe_client_quotas,
)
from protocols.kafka.handlers.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from protocols.kafka.handlers.consumer_group_heartbeat import (
    handle_consumer_group_describe,
    handle_consumer_group_heartbeat,
)
from protocols.kafka.handlers.delegation_tokens import (
    handle_create_delegation_token,
    handle_describe_delegation_token,
    handle_expire_delegation_token,
    handle_renew_delegation_token,
)
from protocols.kafka.handlers.error_responses import ApiKey
from protocols.kafka.handlers.fetch import handle_fetch
from protocols.kafka.handlers.find_coordinator import handle_find_coordinator
from protocols.kafka.handlers.groups import (
    handle_delete_groups,
    handle_describe_groups,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_sync_group,
)
from protocols.kafka.handlers.leader_epoch import handle_offset_for_leader_epoch
from protocols.kafka.handlers.leaders import handle_elect_leaders
from protocols.kafka.handlers.list_offsets import handle_list_offsets
from protocols.kafka.handlers.log_dirs import handle_describe_log_dirs
from protocols.kafka.handlers.metadata import handle_metadata
from protocols.kafka.handlers.offsets import (
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
)
from protocols.kafka.handlers.produce import handle_produce
from protocols.kafka.handlers.producer_ids import handle_init_producer_id
from protocols.kafka.handlers.sasl import handle_sasl_authenticate, handle_sasl_handshake
from protocols.kafka.handlers.scram_admin import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from protocols.kafka.handlers.share_fetch import handle_share_acknowledge, handle_share_fetch
from protocols.kafka.handlers.share_groups import (
    handle_share_group_describe,
    handle_share_group_heartbeat,
)
from protocols.kafka.handlers.share_offsets import (
    handle_alter_share_group_offsets,
    handle_delete_share_group_offsets,
    handle_describe_share_group_offsets,
)
from protocols.kafka.handlers.topics_admin import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
)
from protocols.kafka.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
)
from protocols.kafka.handlers.transactions_admin import (
    handle_describe_transactions,
    handle_list_transactions,
)
from protocols.kafka.handlers.txn_inter_broker import (
    WRITE_TXN_MARKERS,
    handle_txn_offset_commit_or_apply,
    handle_write_txn_markers,
)

Handler = Callable[[RequestContext, RequestHeader, dict], Awaitable[dict]]


@dataclass(frozen=True)
class HandlerSpec:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Handler
    # Served (and advertised) only when the broker has a group coordinator.
    needs_group_coordinator: bool = False
    # Served (and advertised) only when the broker has a transaction coordinator.
    needs_transaction_coordinator: bool = False
    # Served (and advertised) only when the broker has share groups (`broker.share_groups`).
    needs_share_groups: bool = False


HANDLERS: dict[int, HandlerSpec] = {
    spec.api_key: spec
    for spec in (
        HandlerSpec(ApiKey.PRODUCE, "Produce", 0, 11, handle_produce),
        HandlerSpec(ApiKey.FETCH, "Fetch", 4, 16, handle_fetch),
        HandlerSpec(ApiKey.LIST_OFFSETS, "ListOffsets", 0, 9, handle_list_offsets),
        HandlerSpec(ApiKey.METADATA, "Metadata", 0, 12, handle_metadata),
        HandlerSpec(ApiKey.FIND_COORDINATOR, "FindCoordinator", 0, 6, handle_find_coordinator),
        HandlerSpec(ApiKey.API_VERSIONS, "ApiVersions", 0, 4, handle_api_versions),
        HandlerSpec(ApiKey.CREATE_TOPICS, "CreateTopics", 0, 7, handle_create_topics),
        HandlerSpec(ApiKey.DELETE_TOPICS, "DeleteTopics", 0, 6, handle_delete_topics),
        HandlerSpec(ApiKey.INIT_PRODUCER_ID, "InitProducerId", 0, 5, handle_init_producer_id),
        HandlerSpec(ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", 0, 4,
                    handle_offset_for_leader_epoch),
        HandlerSpec(ApiKey.DESCRIBE_CONFIGS, "DescribeConfigs", 0, 4, handle_describe_configs),
        HandlerSpec(ApiKey.CREATE_PARTITIONS, "CreatePartitions", 0, 3,
                    handle_create_partitions),
        # Admin APIs (handlers.configs, handlers.admin, handlers.acls) and SASL (handlers.sasl).
        HandlerSpec(33, "AlterConfigs", 0, 2, handle_alter_configs),
        HandlerSpec(44, "IncrementalAlterConfigs", 0, 1, handle_incremental_alter_configs),
        HandlerSpec(21, "DeleteRecords", 0, 2, handle_delete_records),
        HandlerSpec(60, "DescribeCluster", 0, 1, handle_describe_cluster),
        HandlerSpec(61, "DescribeProducers", 0, 0, handle_describe_producers),
        HandlerSpec(48, "DescribeClientQuotas", 0, 1, handle_describe_client_quotas),
        HandlerSpec(49, "AlterClientQuotas", 0, 1, handle_alter_client_quotas),
        HandlerSpec(29, "DescribeAcls", 0, 3, handle_describe_acls),
        HandlerSpec(30, "CreateAcls", 0, 3, handle_create_acls),
        HandlerSpec(31, "DeleteAcls", 0, 3, handle_delete_acls),
        HandlerSpec(35, "DescribeLogDirs", 0, 4, handle_describe_log_dirs),
        HandlerSpec(43, "ElectLeaders", 0, 2, handle_elect_leaders),
        HandlerSpec(50, "DescribeUserScramCredentials", 0, 0,
                    handle_describe_user_scram_credentials),
        HandlerSpec(51, "AlterUserScramCredentials", 0, 0, handle_alter_user_scram_credentials),
        # KIP-48 delegation tokens (handlers.delegation_tokens; answered
        # DELEGATION_TOKEN_AUTH_DISABLED by a broker without a secret key, as Kafka does)
        HandlerSpec(38, "CreateDelegationToken", 0, 3, handle_create_delegation_token),
        HandlerSpec(39, "RenewDelegationToken", 0, 2, handle_renew_delegation_token),
        HandlerSpec(40, "ExpireDelegationToken", 0, 2, handle_expire_delegation_token),
        HandlerSpec(41, "DescribeDelegationToken", 0, 3, handle_describe_delegation_token),
        HandlerSpec(17, "SaslHandshake", 0, 1, handle_sasl_handshake),
        HandlerSpec(36, "SaslAuthenticate", 0, 2, handle_sasl_authenticate),
        # Consumer groups and committed offsets (protocols.kafka.group_coordinator).
        HandlerSpec(ApiKey.OFFSET_COMMIT, "OffsetCommit", 0, 9, handle_offset_commit, True),
        HandlerSpec(ApiKey.OFFSET_FETCH, "OffsetFetch", 0, 9, handle_offset_fetch, True),
        HandlerSpec(ApiKey.JOIN_GROUP, "JoinGroup", 0, 9, handle_join_group, True),
        HandlerSpec(ApiKey.HEARTBEAT, "Heartbeat", 0, 4, handle_heartbeat, True),
        HandlerSpec(ApiKey.LEAVE_GROUP, "LeaveGroup", 0, 5, handle_leave_group, True),
        HandlerSpec(ApiKey.SYNC_GROUP, "SyncGroup", 0, 5, handle_sync_group, True),
        HandlerSpec(ApiKey.DESCRIBE_GROUPS, "DescribeGroups", 0, 5, handle_describe_groups, True),
        HandlerSpec(ApiKey.LIST_GROUPS, "ListGroups", 0, 5, handle_list_groups, True),
        HandlerSpec(ApiKey.DELETE_GROUPS, "DeleteGroups", 0, 2, handle_delete_groups, True),
        HandlerSpec(ApiKey.OFFSET_DELETE, "OffsetDelete", 0, 0, handle_offset_delete, True),
        # Transactions (protocols.kafka.transaction_coordinator).  EndTxn v5 is KIP-890's
        # per-transaction epoch bump (transaction protocol v2), which is not implemented.
        HandlerSpec(txn.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", 0, 5,
                    handle_add_partitions_to_txn, needs_transaction_coordinator=True),
        HandlerSpec(txn.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", 0, 4,
                    handle_add_offsets_to_txn, needs_transaction_coordinator=True),
        HandlerSpec(txn.END_TXN, "EndTxn", 0, 4, handle_end_txn,
                    needs_transaction_coordinator=True),
        # (producer id -1: a cluster's transaction settling its offsets, handlers.txn_inter_broker)
        HandlerSpec(txn.TXN_OFFSET_COMMIT, "TxnOffsetCommit", 0, 4,
                    handle_txn_offset_commit_or_apply, needs_transaction_coordinator=True),
        # Inter-broker: a cluster's transaction coordinator asks a partition's owner for markers.
        HandlerSpec(WRITE_TXN_MARKERS, "WriteTxnMarkers", 0, 1, handle_write_txn_markers,
                    needs_transaction_coordinator=True),
        # Transaction introspection (kafka-transactions.sh list / describe).
        HandlerSpec(65, "DescribeTransactions", 0, 0, handle_describe_transactions,
                    needs_transaction_coordinator=True),
        HandlerSpec(66, "ListTransactions", 0, 1, handle_list_transactions,
                    needs_transaction_coordinator=True),
        # KIP-848 consumer groups (protocols.kafka.consumer_group_coordinator).
        HandlerSpec(68, "ConsumerGroupHeartbeat", 0, 1, handle_consumer_group_heartbeat, True),
        HandlerSpec(69, "ConsumerGroupDescribe", 0, 0, handle_consumer_group_describe, True),
        # KIP-932 share groups (protocols.kafka.share_group_coordinator, gateway/delivery).
        HandlerSpec(76, "ShareGroupHeartbeat", 1, 1, handle_share_group_heartbeat,
                    needs_share_groups=True),
        HandlerSpec(77, "ShareGroupDescribe", 1, 1, handle_share_group_describe,
                    needs_share_groups=True),
        HandlerSpec(78, "ShareFetch", 1, 2, handle_share_fetch, needs_share_groups=True),
        HandlerSpec(79, "ShareAcknowledge", 1, 2, handle_share_acknowledge,
                    needs_share_groups=True),
        HandlerSpec(90, "DescribeShareGroupOffsets", 0, 0, handle_describe_share_group_offsets,
                    needs_share_groups=True),
        HandlerSpec(91, "AlterShareGroupOffsets", 0, 0, handle_alter_share_group_offsets,
                    needs_share_groups=True),
        HandlerSpec(92, "DeleteShareGroupOffsets", 0, 0, handle_delete_share_group_offsets,
                    needs_share_groups=True),
    )
}

__all__ = ["HANDLERS", "Handler", "HandlerSpec", "ApiKey"]
