"""Topics and their partition logs: what exists (metadata store) and what is open (this broker).

A topic is one node, /ledgerwire/topics/<name>, holding its JSON record (topic_node.py) and
changed only by compare-and-set on its version (every read and write of it: topic_store.py).
Partition p of topic t is the managed ledger
"<namespace>/t-p" (config.namespace, "public/default", unless a
gateway.topics.namespaces.NamespaceRegistry set as `namespaces` maps the topic elsewhere and gives
its namespace's quorum/retention/max-topics policies) plus a small state node under
/ledgerwire/partition-state/<t>/<p> (log start offset, producer snapshot; see partition_log.py).
Partition logs are opened lazily on first use; opening the managed ledger fences and recovers a
crashed predecessor's open ledger, and a log that failed (fenced by another owner) is replaced by
a freshly opened one on the next `partition()` call.  A log nobody used for
`idle_unload_s` is closed, and at most `max_open_partitions` stay open (idle_unloader.py); the
next `partition()` call opens it again.

Topic configs change by compare-and-set too (`alter_topic_configs`): the new configs are written
to the topic node, then applied to the partitions open here -- retention.ms/bytes and the
ledger rollover limits (segment.bytes -> max ledger bytes, segment.ms -> max ledger age) on the
managed ledger's config, max.message.bytes / message.timestamp.type on the partition log's --
and retention runs at once on that topic, so a shorter retention.ms trims old ledgers now.
What the configs mean for a partition is worked out in topic_configs.py; altering and applying
them is topic_config_updates.py's (a mixin of the service).

Deleting a topic first marks its node "deleting" (CAS), then closes and deletes the partitions'
managed ledgers and state, then runs the deletion hooks (the records other rooms keep per
topic: replication's checkpoints, group offsets, share-group state), then deletes the node; a
topic found half-deleted at `load()` is finished off and is never listed (hooks registered by
then run for it; each room also collects what a crash left behind when it starts).  In a
cluster the other brokers run their hooks when the topic leaves their catalogue
(gateway/process/cluster_broker.py's refresh_topics), for what each of them keeps.

This module must never bypass PartitionLog to write a partition, nor change a topic node
without a version check.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

import trio

from gateway.topics.compaction_service import CompactionService
from gateway.topics.idle_unloader import IdleUnloader
from gateway.topics.offload_service import OffloadService
from gateway.topics.partition_log import PartitionLog
from gateway.topics.partition_state import PartitionStateNode
from gateway.topics.topic_config_updates import TopicConfigUpdates
from gateway.topics.topic_configs import (
    TopicServiceConfig,
    validate_topic_configs,
)
from gateway.topics.topic_node import TopicInfo
from gateway.topics.topic_store import TopicStore
from ledger_backend.faults import log_failure
from ledger_backend.metadata.store import (
    CreateOp,
    MetadataStore,
    NodeExistsError,
)
from protocols.kafka.errors import (
    InvalidPartitionsError,
    KafkaProtocolError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from protocols.kafka.topic_names import validate_topic_name
from protocols.rocketmq.topic_names import is_internal_topic

log = logging.getLogger(__name__)

PRODUCER_ID_COUNTER_PATH = "/ledgerwire/producer-id"


class TopicService(TopicConfigUpdates):
    def __init__(self, store: MetadataStore, managed_ledger_factory: Any,
                 config: TopicServiceConfig | None = None) -> None:
        self._store = store
        self._factory = managed_ledger_factory
        self.config = config or TopicServiceConfig()
        self._topics: dict[str, TopicInfo] = {}
        # what topics() hands out: a frozen copy, made again only after the catalogue changed
        # (with 100,000 partitions a copy per produce or Metadata request was milliseconds)
        self._snapshot: Mapping[str, TopicInfo] | None = None
        self._creating: set[str] = set()  # names whose create_topic is writing now
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._unloading: dict[tuple[str, int], PartitionLog] = {}  # idle logs closing now
        # the managed ledger under each open partition log, to apply config changes to it
        self._partition_ledgers: dict[tuple[str, int], Any] = {}
        self._open_locks: dict[tuple[str, int], trio.Lock] = {}
        self.topic_store = TopicStore(store)  # the topic nodes and partition-state parents
        # run with each topic being deleted, after its partitions and before its node go: the
        # rooms above register what they keep per topic (see the module docstring)
        self.deletion_hooks: list[Callable[[TopicInfo], Awaitable[None]]] = []
        # topics a refresh found deleted elsewhere, or replaced by a topic of the name with
        # another id (deleted and created again between two refreshes), with the logs this
        # broker had open of them: collect_gone_elsewhere closes those and runs the hooks
        self._gone_elsewhere: dict[uuid.UUID, tuple[TopicInfo, list[PartitionLog]]] = {}
        self._closed = False
        # advanced by the unloader every tick; partition() stamps the log it hands out with it
        self.use_tick = 0
        self.unloader = IdleUnloader(self, self.config.idle_unload_s,
                                     self.config.max_open_partitions)
        # topic config name -> default from dynamic broker configs (set_broker_defaults)
        self._broker_defaults: dict[str, str] = {}
        # gateway.topics.namespaces.NamespaceRegistry, or None: every topic in config.namespace with
        # the broker's defaults.  Set it before the first partition opens.
        self.namespaces: Any = None
        # gateway.topics.backlog_quota.BacklogQuotas, or None: the Kafka produce and RocketMQ send
        # handlers ask it (`admit`) before appending to a partition.
        self.backlog_quotas: Any = None
        # cleanup.policy=compact: background passes over the partitions open here (`run`),
        # forced passes from the admin API (`compact_topic`).
        self.compaction = CompactionService(
            self, interval_s=self.config.compaction_interval_s,
            max_bytes_per_s=self.config.compaction_max_bytes_per_s)
        self.offload = OffloadService(
            self, threshold_bytes=self.config.offload.threshold_bytes,
            threshold_s=self.config.offload.threshold_seconds,
            deletion_lag_s=self.config.offload.deletion_lag_s,
            interval_s=self.config.offload.interval_s,
            offloader=getattr(managed_ledger_factory, "offloader", None))

    @property
    def metadata_store(self) -> MetadataStore:
        """The store the topic catalogue lives in (other catalogues share it)."""
        return self._store

    # --- catalogue -------------------------------------------------------------------------------

    async def load(self) -> None:
        """Read every topic from the store (and finish interrupted deletions)."""
        topics: dict[str, TopicInfo] = {}
        for name in await self.topic_store.names():
            loaded = await self.topic_store.read(name)
            if loaded is None:
                continue
            info, deleting, version = loaded
            if deleting:
                await self._finish_delete(info, version)
            else:
                topics[name] = info
        self._topics = topics
        self._snapshot = None

    def topics(self) -> Mapping[str, TopicInfo]:
        """Every topic by name: a read-only snapshot that later changes do not touch."""
        snapshot = self._snapshot
        if snapshot is None:
            snapshot = self._snapshot = MappingProxyType(dict(self._topics))
        return snapshot

    def _put_topic(self, info: TopicInfo) -> None:
        self._topics[info.name] = info
        self._snapshot = None

    def _drop_topic(self, name: str) -> None:
        """The topic is gone (deleted here or elsewhere): so is what this broker kept of it."""
        if self._topics.pop(name, None) is not None:
            self._snapshot = None
        self.compaction.forget_topic(name)
        self.offload.forget_topic(name)

    async def refresh_topic(self, name: str) -> TopicInfo | None:
        """Re-read one topic (another broker may have created, changed or deleted it).

        A topic is its id, not its name: one whose id changed was deleted and created again
        meanwhile, and is handled as a deletion followed by a creation (Kafka's topic ids),
        whichever caller's refresh sees it first."""
        loaded = await self.topic_store.read(name)
        known = self._topics.get(name)
        if loaded is None or loaded[1]:
            if known is not None:
                self._gone(known)
            self._drop_topic(name)
            return None
        if known is not None and known.topic_id != loaded[0].topic_id:
            self._gone(known)
            self._drop_topic(name)
        self._put_topic(loaded[0])
        return loaded[0]

    def _gone(self, info: TopicInfo) -> None:
        """Note `info` deleted elsewhere; its open logs here leave at once (a request for the
        name must not reach the old topic's managed ledger) and are closed later."""
        _, logs = self._gone_elsewhere.setdefault(info.topic_id, (info, []))
        for p in range(info.partitions):
            self._partition_ledgers.pop((info.name, p), None)
            plog = self._logs.pop((info.name, p), None)
            if plog is not None:
                logs.append(plog)

    async def collect_gone_elsewhere(self) -> None:
        """For each topic a refresh found deleted elsewhere or replaced (refresh_topic): close
        the logs this broker had open of it and run the deletion hooks, once, with it."""
        while self._gone_elsewhere:
            _, (info, logs) = self._gone_elsewhere.popitem()
            for plog in logs:
                await _close_quietly(plog)
            await self.run_deletion_hooks(info)

    async def create_topic(self, name: str, partitions: int,
                           configs: dict[str, str] | None = None) -> None:
        validate_topic_name(name)
        if partitions == -1:
            partitions = self.config.default_partitions
        if partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be >= 1, got {partitions}")
        configs = {k: str(v) for k, v in (configs or {}).items() if v is not None}
        validate_topic_configs(configs)
        if name in self._creating:
            raise TopicAlreadyExistsError(f"topic {name!r} is being created")
        if self.namespaces is not None:
            try:  # topics being created count too (a CreateTopics request creates at once)
                self.namespaces.check_topic_count(name, [*self._topics, *self._creating])
            except ValueError as exc:
                raise PolicyViolationError(str(exc)) from exc
        info = TopicInfo(name, uuid.uuid4(), partitions, configs)
        self._creating.add(name)
        try:
            await self.topic_store.create(info)
        except NodeExistsError as exc:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists") from exc
        finally:
            self._creating.discard(name)
        self._put_topic(info)
        log.info("created topic %s with %d partitions", name, partitions)

    async def delete_topic(self, name: str) -> None:
        loaded = await self.topic_store.read(name)
        if loaded is None or loaded[1]:
            self._drop_topic(name)
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        info, _, version = loaded
        version = await self.topic_store.write(info, version, deleting=True)
        self._drop_topic(name)
        await self._finish_delete(info, version)
        log.info("deleted topic %s", name)

    async def _finish_delete(self, info: TopicInfo, version: int) -> None:
        _, gone_logs = self._gone_elsewhere.pop(info.topic_id, (info, []))
        for gone_log in gone_logs:  # a refresh under way saw the deletion and took them out
            await _close_quietly(gone_log)
        for p in range(info.partitions):
            plog = self._logs.pop((info.name, p), None)
            self._partition_ledgers.pop((info.name, p), None)
            self._open_locks.pop((info.name, p), None)
            if plog is not None:
                await plog.close()
            ml_name = self.managed_ledger_name(info.name, p)
            if await self._factory.exists(ml_name):
                await self._factory.delete(ml_name)
        self._drop_topic(info.name)  # (again: a pass that ran meanwhile may have noted it)
        await self.run_deletion_hooks(info)
        await self.topic_store.delete(info.name, version)

    async def run_deletion_hooks(self, info: TopicInfo) -> None:
        """Let every room collect what it keeps for `info` (a topic deleted here, or seen gone
        by a broker following the catalogue, for what that broker keeps).  A hook that fails
        is one WARNING (or a traceback for a bug): the topic goes all the same."""
        for hook in list(self.deletion_hooks):
            try:
                await hook(info)
            except Exception:  # noqa: BLE001 - the topic's partitions are gone already
                log_failure(log, "records of deleted topic %s not all collected", info.name)

    async def create_partitions(self, name: str, total: int) -> None:
        loaded = await self.topic_store.read(name)
        if loaded is None or loaded[1]:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        info, _, version = loaded
        if total <= info.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {info.partitions} partitions; the new count must be higher, "
                f"got {total}"
            )
        new = TopicInfo(name, info.topic_id, total, info.configs)
        await self.topic_store.write(new, version)
        self._put_topic(new)

    def partition_ledgers(self, topic: str, partition: int) -> list[Any]:
        """The ledgers (LedgerInfo) of a partition open here; [] when it is not open."""
        ml = self._partition_ledgers.get((topic, partition))
        return list(ml.ledgers) if ml is not None else []

    async def partition_size(self, topic: str, partition: int) -> int:
        """Bytes stored for a partition (opened here if it is not: call it on the owner)."""
        await self.partition(topic, partition)
        return sum(ledger.size for ledger in self.partition_ledgers(topic, partition))

    async def allocate_producer_id(self) -> int:
        return await self._store.next_id(PRODUCER_ID_COUNTER_PATH)

    # --- partitions ------------------------------------------------------------------------------

    def managed_ledger_name(self, topic: str, partition: int) -> str:
        namespace = (self.namespaces.namespace_of(topic) if self.namespaces is not None
                     else self.config.namespace)
        return f"{namespace}/{topic}-{partition}"

    def is_internal(self, topic: str) -> bool:
        """A system topic (RocketMQ's schedule, transaction and retry topics): Kafka Metadata
        marks it is_internal and listings hide it unless asked."""
        return is_internal_topic(topic)

    def auto_create_allowed(self, topic: str) -> bool:
        """Whether `topic` may be created on first use (its namespace's policy, else config)."""
        if self.namespaces is None:
            return self.config.auto_create_topics
        return bool(self.namespaces.auto_create_allowed(topic, self.config.auto_create_topics))

    def open_log(self, topic: str, partition: int) -> PartitionLog | None:
        """`partition()` when the log is open and usable here already (no wait), else None."""
        plog = None if self._closed else self._logs.get((topic, partition))
        if plog is None or plog.failed or plog.closed:
            return None
        plog.used_tick = self.use_tick
        return plog

    async def partition(self, topic: str, partition: int) -> PartitionLog:
        if self._closed:
            raise KafkaProtocolError("topic service is closed")
        plog = self.open_log(topic, partition)
        if plog is not None:
            return plog
        key = (topic, partition)
        info = self._topics.get(topic)
        if info is None or partition >= info.partitions:
            info = await self.refresh_topic(topic)
        if info is None or not 0 <= partition < info.partitions:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        lock = self._open_locks.setdefault(key, trio.Lock())
        async with lock:
            plog = self._logs.get(key)
            if plog is not None and not plog.failed and not plog.closed:
                plog.used_tick = self.use_tick
                return plog
            if plog is not None:
                await _close_quietly(plog)
            plog = await self._open_partition(info, partition)
            plog.used_tick = self.use_tick
            self._logs[key] = plog
            self.unloader.note_opened(len(self._logs))
            return plog

    async def unload_partition(self, key: tuple[str, int], plog: PartitionLog,
                               unused_before: int) -> bool:
        """Close an open log that was not handed out since tick `unused_before` and is not
        busy (idle_unloader.py); False when that no longer holds.  Under the partition's open
        lock: a request for it meanwhile waits for the close and opens it afresh."""
        lock = self._open_locks.setdefault(key, trio.Lock())
        if lock.locked() or self._closed:
            return False
        async with lock:
            if (self._logs.get(key) is not plog or plog.used_tick >= unused_before
                    or plog.busy or self._closed):
                return False
            del self._logs[key]
            self._partition_ledgers.pop(key, None)
            self._unloading[key] = plog
            try:
                await _close_quietly(plog)
            finally:
                del self._unloading[key]
            if not lock.statistics().tasks_waiting:
                self._open_locks.pop(key, None)
        return True

    async def run_unloader(self) -> None:
        """Close idle partition logs and keep the open ones within max_open_partitions
        (idle_unloader.py); start it in the broker's background nursery."""
        await self.unloader.run()

    async def _open_partition(self, info: TopicInfo, partition: int) -> PartitionLog:
        ml_config, plog_config = self._partition_configs(info)
        name = self.managed_ledger_name(info.name, partition)
        state_path = self.topic_store.state_path(info.name, partition)
        # A partition never opened before is created in one metadata write: its managed
        # ledger, first ledger and state node together (factory.py).
        await self.topic_store.ensure_state_dir(info.name)
        state = CreateOp(state_path, json.dumps(PartitionStateNode.initial()).encode())
        ml = await self._factory.open(name, ml_config, create_with=[state])
        if not ml.created_with:
            self.topic_store.forget_state_dir(info.name)  # (it may have been deleted meanwhile)
        try:
            plog = await PartitionLog.open(name, ml, self._store, state_path, plog_config,
                                           state_created=ml.created_with)
            self._partition_ledgers[(info.name, partition)] = ml
            return plog
        except BaseException:
            with trio.CancelScope(shield=True):
                await ml.close()
            raise

    async def apply_retention(self) -> int:
        """Apply retention.ms/bytes to every open partition; returns how many ledgers went."""
        deleted = 0
        for plog in list(self._logs.values()):
            if plog.failed or plog.closing:  # (closed since the list was taken: unloaded)
                continue
            try:
                with plog.pinned():  # not unloaded as idle under the pass
                    deleted += len(await plog.apply_retention())
            except Exception:  # e.g. a hand-off racing retention: the next owner applies it
                log_failure(log, "retention of %s failed", plog.name)
        return deleted

    async def run_retention(self, interval_s: float = 300.0) -> None:
        """Run `apply_retention` forever, every `interval_s` (start it in the broker's nursery)."""
        while not self._closed:
            await trio.sleep(interval_s)
            await self.apply_retention()

    def open_partitions(self) -> dict[tuple[str, int], PartitionLog]:
        return dict(self._logs)

    async def logs_here(self, topic: str) -> list[tuple[int, PartitionLog | None]]:
        """Each partition of `topic` with its log if it is open and usable here (None if
        not): what an admin action on a whole topic (compact, offload) goes through.  The
        topic is read again if this broker does not know it; UnknownTopicOrPartitionError
        if it does not exist."""
        info = self._topics.get(topic) or await self.refresh_topic(topic)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {topic} does not exist")
        logs = [self._logs.get((topic, p)) for p in range(info.partitions)]
        return [(p, plog if plog is not None and not plog.failed and not plog.closed else None)
                for p, plog in enumerate(logs)]

    def unloading_partitions(self) -> dict[tuple[str, int], PartitionLog]:
        """The logs the idle unloader is closing now (no longer open; a second close() of one
        returns once its close is done)."""
        return dict(self._unloading)

    def open_limit_reached(self) -> bool:
        """As many logs are open as max_open_partitions allows (background opens wait for
        requests then)."""
        return self.unloader.over_limit(len(self._logs) + 1)

    def open_partitions_view(self) -> dict[tuple[str, int], PartitionLog]:
        """The open logs themselves, not a copy: do not hold it across a checkpoint."""
        return self._logs

    async def close(self) -> None:
        """Close every open partition log (and so its managed ledger) cleanly."""
        self._closed = True
        logs, self._logs = [*self._logs.values(), *self._unloading.values()], {}
        self._partition_ledgers.clear()
        for plog in logs:
            await _close_quietly(plog)


async def _close_quietly(plog: PartitionLog) -> None:
    try:
        await plog.close()
    except Exception:
        log_failure(log, "closing %s failed", plog.name)
