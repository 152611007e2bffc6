"""Process-side state of the RocketMQ broker: topics, durable consumer offsets, live clients.

`RocketMQBroker` is what the RocketMQ handlers (protocols/rocketmq/handlers) see as the broker:
the shared topic service (queues are partitions, one offset space with Kafka), consumer offsets
kept in a LedgerOffsetStore under their own ledger (__system/offsets/__rocketmq_offsets, keys
group -> (RocketMQ topic, queue id)), the client registry fed by heartbeats, and the broker ->
client notifications (NOTIFY_CONSUMER_IDS_CHANGED), the delay scheduler (delays.py) and
the transaction service (transactions.py).  `run()` is its background work (delayed
delivery, transaction check-back, client expiry); start it in the server nursery next to the
listeners.

This module must never acknowledge an offset commit before the offset store made it durable.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from typing import Any

import trio

from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.delays import DelayScheduler
from gateway.rocketmq.subscription_groups import SubscriptionGroupStore
from gateway.rocketmq.transactions import TransactionService
from gateway.topics.topic_service import TopicService
from ledger_backend.faults import storage_fault_of, warn_fault
from protocols.kafka.errors import KafkaProtocolError, TopicAlreadyExistsError
from protocols.kafka.group_coordinator import CommittedOffset
from protocols.rocketmq.broker_api import RocketMQBrokerConfig, TopicInfoLike
from protocols.rocketmq.broker_stats import BrokerStats
from protocols.rocketmq.client_details import ClientDetails
from protocols.rocketmq.client_registry import ClientRegistry
from protocols.rocketmq.codec import make_request
from protocols.rocketmq.errors import TopicNotExistError
from protocols.rocketmq.handlers.common import StorageError
from protocols.rocketmq.name_server import BrokerEndpoint
from protocols.rocketmq.request_codes import RequestCode
from protocols.rocketmq.topic_names import HALF_TOPIC, OP_HALF_TOPIC, SCHEDULE_TOPIC, from_storage

log = logging.getLogger("ledgerwire.rocketmq")

ROCKETMQ_OFFSETS_LEDGER = "__system/offsets/__rocketmq_offsets"
_SYSTEM_TOPICS = frozenset({SCHEDULE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC})
EXPIRY_SCAN_INTERVAL_S = 10.0


class RocketMQOffsets:
    """group -> (topic, queue) -> offset, read from memory, committed durably.

    `commit` returns once the offset is durable (UPDATE_CONSUMER_OFFSET answers after it).
    `commit_soon` is for the offset a pull carries (sysFlag bit 0), which nothing answers: it
    is written by the writer task (`write_soon_commits`, run in the broker's background
    nursery) after the pull was answered, the pending offsets of one group in one record, the
    newest per key winning while a write is in flight.  Apache's broker keeps these in memory
    and persists them every few seconds; here they are durable one write later.  Memory (what
    QUERY_CONSUMER_OFFSET answers) only ever shows durable offsets, and the offset of the
    write that was appended last for a key, whichever task resumes first.
    """

    def __init__(self, store: LedgerOffsetStore) -> None:
        self._store = store
        self._offsets: dict[str, dict[tuple[str, int], int]] = {}
        self._lock = trio.Lock()
        self._soon: dict[str, dict[tuple[str, int], int]] = {}  # group -> key -> offset
        self._soon_wanted = trio.Event()
        self._writer_running = False
        self._tickets = itertools.count(1)
        self._applied: dict[tuple[str, str, int], int] = {}  # (group, key) -> ticket in memory
        self._closed = False  # close() flushed what was pending; nothing is written after

    async def load(self) -> None:
        state = await self._store.load()
        self._offsets = {g: {k: v.offset for k, v in offsets.items()}
                         for g, offsets in state.items()}

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get(group, {}).get((topic, queue_id))

    async def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = (topic, queue_id)
        pending = self._soon.get(group)
        if pending is not None:  # this later commit wins over a pull's pending one
            pending.pop(key, None)
        if self.query(group, topic, queue_id) == offset:
            return
        await self._write(group, {key: offset})

    async def _write(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Append one commit record; then show its offsets in memory, unless a write of the
        same key appended after it is already shown (tickets follow append order: nothing
        checkpoints between taking one and the ledger taking the entry's id)."""
        now = int(time.time() * 1000)
        ticket = next(self._tickets)
        await self._store.commit(group, {key: CommittedOffset(offset, -1, "", now)
                                         for key, offset in offsets.items()})
        shown = self._offsets.setdefault(group, {})
        for key, offset in offsets.items():
            applied = (group, *key)
            if self._applied.get(applied, 0) < ticket:
                self._applied[applied] = ticket
                shown[key] = offset

    def commit_soon(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """Have the writer task commit `offset` (see the class docstring); False, having done
        nothing, when no writer runs (the caller commits it itself)."""
        if not self._writer_running or self._closed:
            return False
        key = (topic, queue_id)
        pending = self._soon.setdefault(group, {})
        if key not in pending and self.query(group, topic, queue_id) == offset:
            return True
        pending[key] = offset
        self._soon_wanted.set()
        return True

    async def write_soon_commits(self) -> None:
        """The writer task of `commit_soon` (run it in the broker's background nursery).  A
        write under way finishes even when the task is cancelled (bounded by the ledger's own
        timeouts), so its outcome is never left unknown."""
        self._writer_running = True
        try:
            while True:
                await self._soon_wanted.wait()
                self._soon_wanted = trio.Event()
                await self._write_pending()
        finally:
            self._writer_running = False
            with trio.CancelScope(shield=True):
                await self._write_pending()

    async def _write_pending(self) -> None:
        """Write what commit_soon left, group by group.  A write that fails (a storage fault:
        the ledger fenced, a bookie gone) drops those offsets with one WARNING: the consumer
        carries them again in its next pull or offset update, and until then the older
        durable offset stands (messages after it are delivered again, as at-least-once
        allows)."""
        while self._soon and not self._closed:
            group, offsets = self._soon.popitem()
            if not offsets:
                continue
            try:
                with trio.CancelScope(shield=True):
                    await self._write(group, offsets)
            except Exception as exc:
                if storage_fault_of(exc) is None:
                    log.exception("consumer offsets of group %s not committed", group)
                else:
                    warn_fault(log, f"soon-commit:{type(exc).__name__}",
                               "consumer offsets of group %s not committed: %r", group, exc)

    async def advance(self, group: str, topic: str, queue_id: int, to: int) -> None:
        """Move a committed offset forward only (backlog eviction), checked before and after
        the write: a consumer's commit past `to` that lands meanwhile must stay, in memory and
        as the last record of the log."""
        current = self.query(group, topic, queue_id)
        if current is not None and current >= to:
            return
        stamp = int(time.time() * 1000)
        key = (topic, queue_id)
        await self._store.commit(group, {key: CommittedOffset(to, -1, "", stamp)})
        now = self.query(group, topic, queue_id)
        if now is not None and now > to:  # overtaken: the newer commit must be the last record
            await self._store.commit(group, {key: CommittedOffset(now, -1, "", stamp)})
        else:
            self._offsets.setdefault(group, {})[key] = to

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets: (RocketMQ topic, queue id) -> offset."""
        return dict(self._offsets.get(group, {}))

    def groups(self) -> list[str]:
        return sorted(g for g, offsets in self._offsets.items() if offsets)

    def committed_on(self, topic: str, queue_id: int) -> dict[str, int]:
        """group -> committed offset on one (topic, queue) key (backlog quotas ask)."""
        return {g: offsets[(topic, queue_id)] for g, offsets in self._offsets.items()
                if (topic, queue_id) in offsets}

    async def forget_topic(self, topic: str) -> int:
        """Delete every group's offsets of a deleted topic (its RocketMQ name), durably, as
        RocketMQ's broker cleans a deleted topic's consumer offsets: a topic created again
        under the name is consumed from its start, not from the old offsets.  Returns how
        many offsets went."""
        deleted = 0
        for group, offsets in list(self._offsets.items()):
            for key in [k for k in self._soon.get(group, {}) if k[0] == topic]:
                del self._soon[group][key]
            keys = [k for k in offsets if k[0] == topic]
            if not keys:
                continue
            await self._store.delete(group, keys)
            for key in keys:
                offsets.pop(key, None)
                self._applied.pop((group, *key), None)
            deleted += len(keys)
        return deleted

    async def remove_group(self, group: str) -> None:
        """Forget every committed offset of `group`, durably first."""
        self._soon.pop(group, None)
        if group not in self._offsets:
            return
        await self._store.delete(group, None)
        self._offsets.pop(group, None)

    async def close(self) -> None:
        """Write what is pending, then close the store: the writer task, stopped later (the
        broker closes before its background nursery ends), finds nothing left to write."""
        with trio.CancelScope(shield=True):
            await self._write_pending()
        self._closed = True
        await self._store.close()


class StandaloneBacklogOffsets:
    """The standalone broker's RocketMQ offsets as a backlog-quota offset source
    (gateway/topics/backlog_quota.py): keyed there by storage topic and partition (= queue id)."""

    def __init__(self, offsets: RocketMQOffsets) -> None:
        self._offsets = offsets

    def committed_on(self, topic: str, partition: int) -> dict[str, int]:
        return self._offsets.committed_on(from_storage(topic), partition)

    async def advance(self, group: str, topic: str, partition: int, to: int) -> None:
        await self._offsets.advance(group, from_storage(topic), partition, to)


def register_backlog_offsets(topics: Any, source: Any) -> None:
    """Let the topic service's backlog quotas (if any) count these RocketMQ offsets."""
    quotas = getattr(topics, "backlog_quotas", None)
    if quotas is not None and callable(getattr(quotas, "add_offset_source", None)):
        quotas.add_offset_source(source)


async def ensure_storage_topic(topics: Any, topic: str, queue_nums: int, *,
                               explicit: bool = False) -> TopicInfoLike:
    """The topic (storage name), created with `queue_nums` partitions if missing (callers
    serialise concurrent creations).  A namespace whose policy turns auto-creation off gets
    TOPIC_NOT_EXIST instead, unless the creation is `explicit` (an admin's
    UPDATE_AND_CREATE_TOPIC) or the topic is a system one (namespace_forbids_auto_create)."""
    info = topics.topics().get(topic) or await topics.refresh_topic(topic)
    if info is not None:
        return info  # type: ignore[no-any-return]
    if not explicit and namespace_forbids_auto_create(topics, topic):
        raise TopicNotExistError(f"topic[{from_storage(topic)}] not exist, apply first please! "
                                 "(its namespace does not allow auto-creation)")
    try:
        await topics.create_topic(topic, queue_nums)
        log.info("auto-created topic", extra={"topic": topic, "queues": queue_nums})
    except TopicAlreadyExistsError:
        pass
    except KafkaProtocolError as exc:
        raise StorageError(f"cannot create topic {topic}: {exc}") from exc
    info = await topics.refresh_topic(topic)
    if info is None:
        raise StorageError(f"topic {topic} vanished while being created")
    return info  # type: ignore[no-any-return]


def namespace_forbids_auto_create(topics: Any, topic: str) -> bool:
    """True when the (storage) topic's namespace policy says auto_create_topics = false; system
    topics are never refused (the callers already applied [rocketmq] auto_create_topics)."""
    namespaces = getattr(topics, "namespaces", None)
    if namespaces is None or topic.startswith(".") or topic in _SYSTEM_TOPICS:
        return False
    return namespaces.topic_policies(topic).auto_create_topics is False


class ConsumerChangeNotifier:
    """Broker -> client notifications over `clients`, the registry fed by heartbeats: a group's
    consumers get NOTIFY_CONSUMER_IDS_CHANGED (and rebalance) when a member's connection closes
    or expires.  Shared by `RocketMQBroker` and the cluster's ClusterRocketMQ."""

    clients: ClientRegistry

    def notify_consumers_changed(self, group: str) -> None:
        for conn in self.clients.consumer_connections(group):
            conn.send_request(make_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                           {"consumerGroup": group}, oneway=True))

    def connection_closed(self, conn: Any) -> None:
        for group in self.clients.connection_closed(conn):
            self.notify_consumers_changed(group)

    async def _expire_clients(self) -> None:
        """Forget clients that stopped heartbeating, every EXPIRY_SCAN_INTERVAL_S (run it in
        the broker's background nursery)."""
        while True:
            await trio.sleep(EXPIRY_SCAN_INTERVAL_S)
            for group in self.clients.expire(trio.current_time()):
                self.notify_consumers_changed(group)


class RocketMQBroker(ConsumerChangeNotifier):
    def __init__(self, topics: TopicService, offset_store: LedgerOffsetStore,
                 config: RocketMQBrokerConfig | None = None) -> None:
        self.topics: Any = topics
        self.config = config or RocketMQBrokerConfig()
        self.offsets = RocketMQOffsets(offset_store)
        self.boot_timestamp_ms = int(time.time() * 1000)  # GET_BROKER_RUNTIME_INFO reports it
        self.clients = ClientRegistry(self.config.client_expiry_s, self.config.lock_expiry_s)
        self._create_lock = trio.Lock()
        self.delays = DelayScheduler(self, self.config.delay_levels)
        self.transactions = TransactionService(
            self, check_timeout_s=self.config.transaction_check_timeout_s,
            check_interval_s=self.config.transaction_check_interval_s,
            max_checks=self.config.transaction_max_checks)

    async def load(self) -> None:
        """Load committed offsets and transaction decisions (once, before serving)."""
        await self.offsets.load()
        await self.transactions.load()
        await self.subscription_groups.reload()  # `run` keeps the copy fresh afterwards
        register_backlog_offsets(self.topics, StandaloneBacklogOffsets(self.offsets))

    async def close(self) -> None:
        await self.offsets.close()

    def listener_bound(self, port: int) -> None:
        if self.config.advertised_port == 0:
            self.config.advertised_port = port

    def endpoint(self) -> BrokerEndpoint:
        c = self.config
        return BrokerEndpoint(c.cluster_name, c.broker_name, c.broker_id, c.broker_addr)

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    # --- what the admin/statistics handlers read (handlers/admin_stats.py and friends) ------

    @functools.cached_property
    def client_details(self) -> ClientDetails:
        """Language, version and consumer data of each connection (from its heartbeats)."""
        return ClientDetails()

    @functools.cached_property
    def broker_stats(self) -> BrokerStats:
        return BrokerStats()

    @functools.cached_property
    def subscription_groups(self) -> SubscriptionGroupStore:
        """Durable subscription-group configs, in the topic catalogue's metadata store."""
        return SubscriptionGroupStore(self.topics.metadata_store)

    def message_totals(self) -> tuple[int, int]:
        """(messages stored in the queues open here, messages consumed by committed offsets)."""
        puts = sum(max(p.high_watermark, 0) for p in self.topics.open_partitions().values())
        gets = sum(sum(self.offsets.committed(g).values()) for g in self.offsets.groups())
        return puts, gets

    async def ensure_topic(self, topic: str, queue_nums: int, *,
                           explicit: bool = False) -> TopicInfoLike:
        """The topic (storage name), created with `queue_nums` partitions if missing, as
        ensure_storage_topic decides (namespace policy, explicit admin creations)."""
        async with self._create_lock:
            return await ensure_storage_topic(self.topics, topic, queue_nums, explicit=explicit)

    async def run(self) -> None:
        """Background work: delayed delivery, transaction check-back, client expiry."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.offsets.write_soon_commits)
            nursery.start_soon(self.delays.run)
            nursery.start_soon(self.transactions.run)
            nursery.start_soon(self._expire_clients)
            nursery.start_soon(self.subscription_groups.follow)
