"""Finding topics and partitions for the handlers, with Kafka's errors for the missing ones.

Every handler that names a topic goes through here, so "unknown topic", "unknown partition",
"unknown topic id" and "illegal topic name" mean the same thing in every API.

In a cluster (the broker has an ownership service, broker_api.ownership_of) a partition is
served only by its owner: `open_partition` refuses others with NOT_LEADER_OR_FOLLOWER so the
client refreshes its metadata (on the owner that still loads the partition's bundle it waits up
to LOADING_WAIT_S for the load), and the log it returns re-checks ownership after every change
(an append, a transaction marker, DeleteRecords), so a broker that lost ownership while the
change was in flight (paused past its ZooKeeper session, or releasing the partition) never
reports it done.  The entry may still be in the log (the new owner recovered it); an idempotent
producer's retry is then answered as a duplicate, a repeated DeleteRecords finds the log start
already there.

This module must never create or change topics: it only looks them up and validates names.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from protocols.kafka.broker_api import (
    AppendResultView,
    OwnershipApi,
    PartitionLogApi,
    RequestContext,
    ownership_of,
)
from protocols.kafka.built_batch import BuiltBatch
from protocols.kafka.errors import (
    NotLeaderOrFollowerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)

LOADING_WAIT_S = 2.5  # a request for a partition whose bundle this broker still loads waits


def topic_info(ctx: RequestContext, name: str | None) -> Any | None:
    """The TopicInfo of `name`, or None."""
    if name is None:
        return None
    return ctx.topics.topics().get(name)


def topic_by_id(ctx: RequestContext, topic_id: uuid.UUID | None) -> Any | None:
    """The TopicInfo whose id is `topic_id`, or None (the zero uuid never matches)."""
    if topic_id is None or topic_id.int == 0:
        return None
    for info in ctx.topics.topics().values():
        if info.topic_id == topic_id:
            return info
    return None


def require_topic_id(ctx: RequestContext, topic_id: uuid.UUID | None) -> Any:
    info = topic_by_id(ctx, topic_id)
    if info is None:
        raise UnknownTopicIdError(f"unknown topic id {topic_id}")
    return info


async def open_partition(ctx: RequestContext, topic: str | None, partition: int, *,
                         log_only: bool = False) -> PartitionLogApi:
    """The partition log of `topic`/`partition`; UnknownTopicOrPartitionError when absent.

    `log_only`: the caller needs nothing but the partition's log (a plain produce or fetch),
    so on a broker still loading the partition's bundle it is served as soon as the partition
    itself is open (fenced, recovered: ownership `serves_partition`), not after the bundle's
    coordinators and extensions."""
    info = topic_info(ctx, topic)
    if info is None or topic is None:
        raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
    if not 0 <= partition < info.partitions:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
    ownership = ownership_of(ctx.broker)
    if ownership is None:
        return await ctx.topics.partition(topic, partition)
    if log_only:
        local, until = ownership.serves_partition, ownership.until_serving
    else:
        local, until = ownership.is_local, ownership.until_local
    if not local(topic, partition):
        # held here but still loading (a failover fences and recovers the earlier owner's
        # ledgers): wait for the load rather than refuse, which costs the client a metadata
        # round and a retry back-off (up to 0.5-1 s) after the bundle is ready
        await until(topic, partition, LOADING_WAIT_S)
    require_local(ownership, topic, partition, local)
    plog = await ctx.topics.partition(topic, partition)
    require_local(ownership, topic, partition, local)
    return OwnedPartitionLog(plog, ownership, topic, partition, local)


def require_local(ownership: OwnershipApi, topic: str, partition: int,
                  local: Callable[[str, int], bool] | None = None) -> None:
    if not (local or ownership.is_local)(topic, partition):
        owner = ownership.owner_of(topic, partition)
        where = f"broker {owner.node_id}" if owner is not None else "no broker yet"
        raise NotLeaderOrFollowerError(f"{topic}-{partition} is owned by {where}")


class OwnedPartitionLog:
    """A partition log that reports a change as done only if this broker still owns the
    partition when the change completed: every method that changes the log has its own method
    here (`append`, `append_built`, `append_built_soon`, `write_txn_marker`,
    `delete_records_before`), since `__getattr__` would hand it over unchecked; reads go
    through `__getattr__`.  A change that outlived the ownership may still have happened (the
    new owner recovered it): the client's retry on the new owner finds it done, as an
    idempotent producer's duplicate or a log start already moved."""

    def __init__(self, inner: PartitionLogApi, ownership: OwnershipApi, topic: str,
                 partition: int, local: Callable[[str, int], bool] | None = None) -> None:
        self._inner = inner
        self._ownership = ownership
        self._topic = topic
        self._partition = partition
        self._local = local

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, records: bytes | memoryview, *,
                     timestamp_type_log_append: bool = False) -> AppendResultView:
        result = await self._inner.append(records,
                                          timestamp_type_log_append=timestamp_type_log_append)
        require_local(self._ownership, self._topic, self._partition, self._local)
        return result

    async def append_built(self, batch: BuiltBatch) -> AppendResultView:
        result = await self._inner.append_built(batch)
        require_local(self._ownership, self._topic, self._partition, self._local)
        return result

    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        offset = await self._inner.write_txn_marker(producer_id, producer_epoch, commit,
                                                    coordinator_epoch)
        require_local(self._ownership, self._topic, self._partition, self._local)
        return offset

    async def delete_records_before(self, offset: int) -> int:
        low = await self._inner.delete_records_before(offset)
        require_local(self._ownership, self._topic, self._partition, self._local)
        return low

    def append_built_soon(self, batch: BuiltBatch,
                          on_done: Callable[[AppendResultView | BaseException], None]) -> bool:
        """The log's append_built_soon (a completion callback instead of a waiting task),
        its result checked as append_built's is; False when the log has none."""
        soon = getattr(self._inner, "append_built_soon", None)
        if soon is None:
            return False

        def checked(result: AppendResultView | BaseException) -> None:
            if not isinstance(result, BaseException):
                try:
                    require_local(self._ownership, self._topic, self._partition, self._local)
                except NotLeaderOrFollowerError as exc:
                    result = exc
            on_done(result)

        started: bool = soon(batch, checked)
        return started
