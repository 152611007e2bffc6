"""The dispatch table: API key -> the handler and the versions it implements.

A handler is `async def handle_<api>(ctx, header, body) -> dict` (the response body, snake_case
keys as the codec expects).  Handlers report per-topic/partition failures in their answers; any
exception that escapes a handler is turned into a whole-request error response by the broker,
through `error_responses.whole_request_error` (the one place exceptions become responses).

The version ranges here are what each handler implements; the broker intersects them with the
codec's schema table and advertises the result in ApiVersions, and nothing else.  Specs marked
`needs_group_coordinator` are served and advertised only when the broker was given a group
coordinator.  Requests of one connection run concurrently under Kafka's ordering rules
(`request_order`).

This module must never import gateway/ or do I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.handlers.api_versions import handle_api_versions
from protocols.kafka.handlers.configs import handle_describe_configs
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
from protocols.kafka.handlers.list_offsets import handle_list_offsets
from protocols.kafka.handlers.metadata import handle_metadata
from protocols.kafka.handlers.offsets import (
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
)
from protocols.kafka.handlers.produce import handle_produce
from protocols.kafka.handlers.producer_ids import handle_init_producer_id
from protocols.kafka.handlers.topics_admin import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
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
        # Consumer groups and committed offsets (protocols.kafka.group_coordinator).
        HandlerSpec(ApiKey.OFFSET_COMMIT, "OffsetCommit", 0, 8, handle_offset_commit, True),
        HandlerSpec(ApiKey.OFFSET_FETCH, "OffsetFetch", 0, 8, handle_offset_fetch, True),
        HandlerSpec(ApiKey.JOIN_GROUP, "JoinGroup", 0, 9, handle_join_group, True),
        HandlerSpec(ApiKey.HEARTBEAT, "Heartbeat", 0, 4, handle_heartbeat, True),
        HandlerSpec(ApiKey.LEAVE_GROUP, "LeaveGroup", 0, 5, handle_leave_group, True),
        HandlerSpec(ApiKey.SYNC_GROUP, "SyncGroup", 0, 5, handle_sync_group, True),
        HandlerSpec(ApiKey.DESCRIBE_GROUPS, "DescribeGroups", 0, 5, handle_describe_groups, True),
        HandlerSpec(ApiKey.LIST_GROUPS, "ListGroups", 0, 5, handle_list_groups, True),
        HandlerSpec(ApiKey.DELETE_GROUPS, "DeleteGroups", 0, 2, handle_delete_groups, True),
        HandlerSpec(ApiKey.OFFSET_DELETE, "OffsetDelete", 0, 0, handle_offset_delete, True),
    )
}

__all__ = ["HANDLERS", "Handler", "HandlerSpec", "ApiKey"]
