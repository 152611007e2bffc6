"""The Kafka handlers in a cluster: Metadata names each partition's owner as leader and lists
the live brokers, FindCoordinator names the coordinator partition's owner, a non-owner refuses
produce and fetch with NOT_LEADER_OR_FOLLOWER and group calls with NOT_COORDINATOR, and an
append that completes after ownership was lost is not acknowledged.  Metadata answers are
checked as clients see them (encoded, then decoded): listed topics are cached encoded, and a
changed owner or partition count is listed anew."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing

from gateway.cluster.broker_registry import ClusterLayout
from gateway.cluster.bundle_placement import BUNDLE_PINNED_PREFIXES
from gateway.cluster.ownership import OwnershipService
from gateway.coordinator.group_partitions import ClusterGroupCoordinator
from gateway.topics.topic_node import TopicInfo
from protocols.kafka.broker_api import BrokerEndpoint, RequestContext
from protocols.kafka.built_batch import built_batch
from protocols.kafka.codec import RequestHeader, decode_response, encode_response
from protocols.kafka.errors import ErrorCode, NotLeaderOrFollowerError
from protocols.kafka.group_coordinator import GroupError
from protocols.kafka.handlers.find_coordinator import handle_find_coordinator
from protocols.kafka.handlers.metadata import handle_metadata
from protocols.kafka.handlers.topic_lookup import open_partition

ME = BrokerEndpoint(1, "10.0.0.1", 9092)
OTHER = BrokerEndpoint(2, "10.0.0.2", 9092)


class FakeLog:
    log_start_offset = 0
    high_watermark = 0

    def __init__(self) -> None:
        self.appended = 0
        self.during_append: Any = None

    async def append(self, records: Any, *, timestamp_type_log_append: bool = False) -> Any:
        self.appended += 1
        if self.during_append is not None:
            self.during_append()
        return object()

    async def append_built(self, batch: Any) -> Any:  # a batch the broker encoded itself
        return await self.append(batch)

    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        return int(await self.append(b"marker") is None)

    async def delete_records_before(self, offset: int) -> int:
        self.trimmed_to = offset
        if self.during_append is not None:
            self.during_append()
        return offset


class FakeTopics:
    def __init__(self) -> None:
        self.info = TopicInfo("t", uuid.uuid4(), 4)
        self.log = FakeLog()

    def topics(self) -> dict[str, TopicInfo]:
        return {"t": self.info}

    async def partition(self, topic: str, partition: int) -> FakeLog:
        return self.log


class FakeOwnership:
    """Even partitions and group keys starting with "a" are local; the rest belong to OTHER."""

    def __init__(self) -> None:
        self.lost = False
        self.gone = False  # no live owner for any partition
        self.asked: set[str] | None = None  # what Metadata noted last

    def live_brokers(self) -> list[BrokerEndpoint]:
        return [ME, OTHER]

    def listed_brokers(self) -> list[BrokerEndpoint]:
        return self.live_brokers()

    def note_asked(self, topics: Any) -> None:
        self.asked = set(topics)

    async def until_local(self, topic: str, partition: int, timeout_s: float) -> bool:
        return self.is_local(topic, partition)

    early: frozenset[int] = frozenset()  # partitions opened while their bundle still loads

    def serves_partition(self, topic: str, partition: int) -> bool:
        return self.is_local(topic, partition) or (not self.lost and partition in self.early)

    async def until_serving(self, topic: str, partition: int, timeout_s: float) -> bool:
        return self.serves_partition(topic, partition)

    def owner_of(self, topic: str, partition: int) -> BrokerEndpoint | None:
        if self.gone:
            return None
        if self.lost:
            return OTHER
        return ME if partition % 2 == 0 else OTHER

    def is_local(self, topic: str, partition: int) -> bool:
        return not self.lost and self.owner_of(topic, partition) == ME

    def coordinator_unit(self, key_type: int, key: str) -> tuple[str, int]:
        return ("__consumer_offsets", 0 if key.startswith("a") else 1)

    def coordinator_owner(self, key_type: int, key: str) -> BrokerEndpoint | None:
        return ME if key.startswith("a") else OTHER

    def coordinator_is_local(self, key_type: int, key: str) -> bool:
        return self.coordinator_owner(key_type, key) == ME


@dataclass
class Settings:
    broker_id: int = 1
    cluster_id: str = "c"
    auto_create_topics: bool = False
    default_partitions: int = 1
    max_message_bytes: int = 1 << 20
    retention_ms: int = -1
    retention_bytes: int = -1
    rack: str | None = None


class FakeBroker:
    def __init__(self) -> None:
        self.topic_service = FakeTopics()
        self.config = Settings()
        self.advertised_host, self.advertised_port = ME.host, ME.port
        self.group_coordinator = None
        self.ownership = FakeOwnership()


def header(api_key: int, version: int) -> RequestHeader:
    return RequestHeader(api_key=api_key, api_version=version, correlation_id=1, client_id="x")


async def metadata(ctx: RequestContext, version: int, topics: Any = None) -> dict[str, Any]:
    """A Metadata answer as the client decodes it."""
    answer = await handle_metadata(ctx, header(3, version), {"topics": topics})
    frame = encode_response(header(3, version), answer)
    return decode_response(3, version, frame[4:])[1]


def leaders_of(answer: dict[str, Any]) -> dict[int, int]:
    return {p["partition_index"]: p["leader_id"] for p in answer["topics"][0]["partitions"]}


async def test_metadata_names_owners_and_live_brokers() -> None:
    broker = FakeBroker()
    ctx = RequestContext(broker=broker)  # type: ignore[arg-type]
    answer = await metadata(ctx, 12)
    assert {b["node_id"] for b in answer["brokers"]} == {1, 2}
    assert broker.ownership.asked is None  # a listing of all topics names none
    await metadata(ctx, 12, [{"name": "t", "topic_id": None}])
    assert broker.ownership.asked == {"t"}
    assert leaders_of(answer) == {0: 1, 1: 2, 2: 1, 3: 2}


async def test_metadata_notes_only_topics_that_exist() -> None:
    """Names a client makes up are not remembered (the asked set stays within the catalogue,
    whatever a client sends)."""
    broker = FakeBroker()
    ctx = RequestContext(broker=broker)  # type: ignore[arg-type]
    names = [{"name": "t", "topic_id": None}] + [
        {"name": f"made-up-{i}", "topic_id": None} for i in range(100)]
    await metadata(ctx, 12, names)
    assert broker.ownership.asked == {"t"}


@pytest.mark.parametrize("version", [1, 9, 12])
async def test_listed_topics_are_listed_anew_when_owners_or_partitions_change(
        version: int) -> None:
    broker = FakeBroker()
    ctx = RequestContext(broker=broker)  # type: ignore[arg-type]
    first = await metadata(ctx, version)
    assert await metadata(ctx, version) == first  # from the cache, byte for byte alike
    assert await metadata(ctx, version, [{"name": "t", "topic_id": None}]) == first
    broker.ownership.lost = True  # every partition moved to broker 2
    assert leaders_of(await metadata(ctx, version)) == {0: 2, 1: 2, 2: 2, 3: 2}
    info = broker.topic_service.info
    broker.topic_service.info = TopicInfo("t", info.topic_id, 6)
    assert leaders_of(await metadata(ctx, version)) == {p: 2 for p in range(6)}
    broker.ownership.gone = True
    orphaned = (await metadata(ctx, version))["topics"][0]["partitions"]
    assert {(p["leader_id"], p["error_code"], tuple(p["isr_nodes"])) for p in orphaned} == {
        (-1, ErrorCode.LEADER_NOT_AVAILABLE, ())}
    broker.ownership.gone = False
    broker.ownership.lost = False
    again = await metadata(ctx, version)
    assert leaders_of(again) == {p: 1 if p % 2 == 0 else 2 for p in range(6)}
    assert again["topics"][0]["name"] == "t"
    if version >= 10:
        assert again["topics"][0]["topic_id"] == info.topic_id


def test_partition_leaders_agree_with_owner_of() -> None:
    ownership = OwnershipService(None, ClusterLayout(bundles=5), ME,  # type: ignore[arg-type]
                                 session_timeout_s=10)
    ownership._reconciled = True  # as after a reconcile round: bundle 1 held, others read
    ownership._owned = {1}
    ownership._live = {1: ME, 2: OTHER}
    ownership._owners = {0: 2, 2: 2, 3: 9}  # 9 is not live: bundle 3 has no leader
    table = ownership.leader_table()
    assert -1 in table and 1 in table and 2 in table
    for topic in ["t", "orders", "x" * 40, BUNDLE_PINNED_PREFIXES[0] + "q"]:
        expected = tuple(owner.node_id if (owner := ownership.owner_of(topic, p)) else -1
                         for p in range(12))
        assert ownership.partition_leaders(topic, 12, table) == expected


async def test_find_coordinator_names_the_coordinator_partition_owner() -> None:
    ctx = RequestContext(broker=FakeBroker())  # type: ignore[arg-type]
    v4 = await handle_find_coordinator(ctx, header(10, 4),
                                       {"key_type": 0, "coordinator_keys": ["alpha", "beta"]})
    assert [(c["key"], c["node_id"], c["host"]) for c in v4["coordinators"]] == [
        ("alpha", 1, "10.0.0.1"), ("beta", 2, "10.0.0.2")]
    v3 = await handle_find_coordinator(ctx, header(10, 3), {"key": "beta", "key_type": 1})
    assert (v3["node_id"], v3["error_code"]) == (2, 0)


async def test_non_owner_refuses_and_lost_ownership_is_never_acknowledged() -> None:
    broker = FakeBroker()
    ctx = RequestContext(broker=broker)  # type: ignore[arg-type]
    with pytest.raises(NotLeaderOrFollowerError):
        await open_partition(ctx, "t", 1)
    plog = await open_partition(ctx, "t", 2)
    await plog.append(b"x")

    def lose() -> None:
        broker.ownership.lost = True

    broker.topic_service.log.during_append = lose
    with pytest.raises(NotLeaderOrFollowerError):
        await plog.append(b"y")
    assert broker.topic_service.log.appended == 2


async def test_a_built_batch_that_outlives_ownership_is_never_acknowledged() -> None:
    """append_built (the trusted path for batches the broker encoded) is checked like append:
    the wrapper's __getattr__ must not hand it to the log unchecked."""
    broker = FakeBroker()
    ctx = RequestContext(broker=broker)  # type: ignore[arg-type]
    plog = await open_partition(ctx, "t", 2)
    batch = built_batch([(b"k", b"v")])
    await plog.append_built(batch)

    def lose() -> None:
        broker.ownership.lost = True

    broker.topic_service.log.during_append = lose
    with pytest.raises(NotLeaderOrFollowerError):
        await plog.append_built(batch)
    assert broker.topic_service.log.appended == 2  # stored (the new owner recovers it)


async def test_delete_records_and_markers_that_outlive_ownership_are_never_reported_done(
        ) -> None:
    """DeleteRecords and WriteTxnMarkers whose change completes after ownership was lost answer
    NOT_LEADER_OR_FOLLOWER (the admin client and the coordinator retry on the new owner), not
    success: the wrapper checks every method that changes the log, not only appends."""
    from protocols.kafka.handlers.admin import handle_delete_records
    from protocols.kafka.handlers.txn_inter_broker import handle_write_txn_markers

    broker = FakeBroker()
    ctx = RequestContext(broker=broker)  # type: ignore[arg-type]
    log = broker.topic_service.log

    async def delete_records() -> dict[str, Any]:
        answer = await handle_delete_records(ctx, header(21, 2), {"topics": [
            {"name": "t", "partitions": [{"partition_index": 2, "offset": 5}]}]})
        partition: dict[str, Any] = answer["topics"][0]["partitions"][0]
        return partition

    async def write_marker() -> int:
        answer = await handle_write_txn_markers(ctx, header(27, 1), {"markers": [{
            "producer_id": 7, "producer_epoch": 0, "transaction_result": True,
            "coordinator_epoch": 0, "topics": [{"name": "t", "partition_indexes": [2]}]}]})
        return int(answer["markers"][0]["topics"][0]["partitions"][0]["error_code"])

    assert (await delete_records())["error_code"] == 0
    assert await write_marker() == 0

    def lose() -> None:
        broker.ownership.lost = True

    log.during_append = lose
    done = await delete_records()
    assert (done["error_code"], done["low_watermark"]) == (
        ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    assert log.trimmed_to == 5  # it happened here; the new owner's log start agrees
    broker.ownership.lost = False
    assert await write_marker() == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_a_partition_opened_before_its_bundle_is_loaded_serves_produce_and_fetch() -> None:
    broker = FakeBroker()
    broker.ownership.early = frozenset({1})  # held here, opened; its bundle still loads
    ctx = RequestContext(broker=broker)  # type: ignore[arg-type]
    plog = await open_partition(ctx, "t", 1, log_only=True)  # produce, fetch
    await plog.append(b"x")
    with pytest.raises(NotLeaderOrFollowerError):
        await open_partition(ctx, "t", 1)  # anything else waits for the whole bundle
    with pytest.raises(NotLeaderOrFollowerError):
        await open_partition(ctx, "t", 3, log_only=True)  # not opened yet

    def lose() -> None:
        broker.ownership.lost = True

    broker.topic_service.log.during_append = lose
    with pytest.raises(NotLeaderOrFollowerError):
        await plog.append(b"y")  # lost while appending: never acknowledged


async def test_group_calls_for_a_group_owned_elsewhere_get_not_coordinator() -> None:
    async with trio.open_nursery() as nursery:
        groups = ClusterGroupCoordinator(None, None, FakeOwnership(), nursery)  # type: ignore[arg-type]
        with pytest.raises(GroupError) as caught:
            groups.heartbeat(group_id="beta", member_id="m", generation_id=1)
        assert caught.value.code == ErrorCode.NOT_COORDINATOR
        with pytest.raises(GroupError):  # local partition, but not loaded yet
            groups.fetch_offsets("alpha", None)
        with pytest.raises(GroupError):
            groups.consumer_groups.described("beta")


class ClosableLog:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class LayoutOwnership:
    class layout:  # noqa: N801 - mimics OwnershipService.layout
        bundles = 4

    def units_in_bundle(self, bundle: int) -> list[tuple[str, int]]:
        return []

    def is_local(self, topic: str, partition: int) -> bool:
        return False

    def recently_asked(self) -> set[str]:
        return set()

    def partition_opened(self, bundle: int, topic: str, partition: int) -> None:
        self.opened_early = [*getattr(self, "opened_early", []), partition]


class OpenLogs:
    def __init__(self, logs: dict[tuple[str, int], ClosableLog]) -> None:
        self.logs = logs

    def open_partitions(self) -> dict[tuple[str, int], ClosableLog]:
        return dict(self.logs)

    def unloading_partitions(self) -> dict[tuple[str, int], ClosableLog]:
        return {}

    def topics(self) -> dict[str, Any]:
        return {}


async def test_acquiring_a_bundle_closes_stale_logs_of_it() -> None:
    """A log left open from an earlier ownership (a request that raced a release) must not be
    reused when the bundle comes back: its producer state may be behind the real log."""
    from gateway.cluster.bundle_placement import bundle_of
    from gateway.process.bundle_hooks import BundleHooks

    logs = {("t", p): ClosableLog() for p in range(4)}
    async with trio.open_nursery() as nursery:
        hooks = BundleHooks(OpenLogs(logs), nursery)  # type: ignore[arg-type]
        hooks.ownership = LayoutOwnership()  # type: ignore[assignment]
        hooks.groups = object()  # type: ignore[assignment]
        target = bundle_of("t", 2, 4)
        await hooks.acquired(target)
    assert [p for (_, p), plog in logs.items() if plog.closed] == [
        p for p in range(4) if bundle_of("t", p, 4) == target]


class SlowClosingLog(ClosableLog):
    """A log whose close takes 10 s (virtual time): a snapshot and a ledger close that wait."""

    async def close(self) -> None:
        await trio.sleep(10)
        self.closed = True


async def test_releasing_a_bundle_closes_its_logs_side_by_side(
        autojump_clock: trio.testing.MockClock) -> None:  # noqa: ARG001
    """A bundle's partitions answer nowhere until its release is done: 8 closes that take
    10 s each are one wait, not 8 (80 s before)."""
    from gateway.cluster.bundle_placement import bundle_of
    from gateway.process.bundle_hooks import BundleHooks

    target = bundle_of("t", 0, 4)
    logs = {("t", p): SlowClosingLog() for p in range(32) if bundle_of("t", p, 4) == target}
    async with trio.open_nursery() as nursery:
        hooks = BundleHooks(OpenLogs(logs), nursery)  # type: ignore[arg-type]
        hooks.ownership = LayoutOwnership()  # type: ignore[assignment]
        hooks.groups = object()  # type: ignore[assignment]
        started = trio.current_time()
        await hooks.releasing(target)
        assert trio.current_time() - started < 20
    assert len(logs) == 8 and all(plog.closed for plog in logs.values())


class OpeningTopics:
    """Partitions whose open takes 1 s (virtual time): a fence and a recovery."""

    def __init__(self, partitions: int) -> None:
        self.info = TopicInfo("t", uuid.uuid4(), partitions)
        self.opening = 0
        self.most_at_once = 0
        self.opened: set[int] = set()

    def open_partitions(self) -> dict[tuple[str, int], ClosableLog]:
        return {}

    def unloading_partitions(self) -> dict[tuple[str, int], ClosableLog]:
        return {}

    def open_limit_reached(self) -> bool:
        return False

    def topics(self) -> dict[str, Any]:
        return {"t": self.info}

    async def partition(self, topic: str, partition: int) -> ClosableLog:
        self.opening += 1
        self.most_at_once = max(self.most_at_once, self.opening)
        try:
            await trio.sleep(1)
        finally:
            self.opening -= 1
        self.opened.add(partition)
        return ClosableLog()


class HoldingOwnership(LayoutOwnership):
    def holds_bundle(self, bundle: int) -> bool:
        return True


async def test_a_failover_opens_a_few_partitions_at_a_time_and_requests_at_once(
        autojump_clock: trio.testing.MockClock) -> None:  # noqa: ARG001
    """Acquiring a bundle of 100 partitions opens them BACKGROUND_OPENS at a time, and a
    client's request for one of them opens it at once: before, all 100 opened together and a
    request waited for the crowd (a failover's resume followed the partition count)."""
    from gateway.cluster.bundle_placement import bundle_of
    from gateway.process.bundle_hooks import BACKGROUND_OPENS, BundleHooks

    topics = OpeningTopics(400)
    target = bundle_of("t", 0, 4)
    mine = [p for p in range(400) if bundle_of("t", p, 4) == target]
    async with trio.open_nursery() as nursery:
        hooks = BundleHooks(topics, nursery)  # type: ignore[arg-type]
        hooks.ownership = HoldingOwnership()  # type: ignore[assignment]
        hooks.groups = object()  # type: ignore[assignment]
        await hooks.acquired(target)
        await trio.sleep(0.5)
        started = trio.current_time()
        await topics.partition("t", mine[-1])  # a request, while the background opens run
        assert trio.current_time() - started <= 1.5
    assert topics.opened == set(mine)
    assert topics.most_at_once <= BACKGROUND_OPENS + 1  # the request's own open beside them


class HeldGroups:
    """A coordinator partition whose load waits for `release`."""

    def __init__(self) -> None:
        self.release = trio.Event()

    async def start_partition(self, partition: int) -> None:
        await self.release.wait()


class GroupUnitOwnership(HoldingOwnership):
    asked: set[str] = set()

    def units_in_bundle(self, bundle: int) -> list[tuple[str, int]]:
        return [("__consumer_offsets", 0)]

    def recently_asked(self) -> set[str]:
        return self.asked


async def test_a_bundle_opens_its_partitions_in_the_background_only_after_its_loads(
        autojump_clock: trio.testing.MockClock) -> None:  # noqa: ARG001
    """While a taken-over bundle's coordinators load (every request waits for that), only the
    partitions requests wait for are opened; the rest follow once the bundle is ready."""
    from gateway.cluster.bundle_placement import bundle_of
    from gateway.process.bundle_hooks import BundleHooks

    topics = OpeningTopics(40)
    target = bundle_of("t", 0, 4)
    groups = HeldGroups()
    async with trio.open_nursery() as nursery:
        hooks = BundleHooks(topics, nursery)  # type: ignore[arg-type]
        hooks.ownership = GroupUnitOwnership()  # type: ignore[assignment]
        hooks.groups = groups  # type: ignore[assignment]
        nursery.start_soon(hooks.acquired, target)
        await trio.sleep(0.1)
        hooks.open_now(target, "t", 0)  # a request waits for partition 0
        await trio.sleep(5)
        assert topics.opened == {0}
        # opened within the acquisition: produce and fetch are served on it before the load
        assert hooks.ownership.opened_early == [0]  # type: ignore[union-attr]
        groups.release.set()
    mine = {p for p in range(40) if bundle_of("t", p, 4) == target}
    assert topics.opened == mine
    # a topic clients asked about lately (a producer whose broker died asks every second)
    # is opened at once, beside the loads
    topics, groups = OpeningTopics(40), HeldGroups()
    async with trio.open_nursery() as nursery:
        hooks = BundleHooks(topics, nursery)  # type: ignore[arg-type]
        asking = GroupUnitOwnership()
        asking.asked = {"t"}
        hooks.ownership = asking  # type: ignore[assignment]
        hooks.groups = groups  # type: ignore[assignment]
        nursery.start_soon(hooks.acquired, target)
        await trio.sleep(5)
        assert topics.opened == mine
        groups.release.set()


class Joining:
    """A cluster broker's ownership before its first reconcile (it waits out its old
    registration after a kill -9): it knows no other broker and no owner."""

    answers_clients = False


async def test_a_broker_takes_client_connections_only_once_it_knows_the_cluster() -> None:
    """Before, a restarted broker answered Metadata while it waited to register: no leader for
    any partition, itself at port 0, and librdkafka stalled on that (chaos.py: 7.7 s)."""
    from tests.kafka_server.conftest import running_stack
    from tests.kafka_server.kafka_wire_client import WireClient

    async with running_stack() as stack:
        joining = Joining()
        stack.broker.ownership = joining  # type: ignore[attr-defined]
        async with await WireClient.connect(stack.port) as early:
            assert await early.closed_by_server()  # as if not up yet: it asks another broker
        joining.answers_clients = True
        async with await WireClient.connect(stack.port) as later:
            answer = await later.request(18, 3, {"client_software_name": "t",
                                                    "client_software_version": "1"})
            assert answer["error_code"] == 0


class TwoTopics(OpeningTopics):
    """Topic "t" (clients asked about it) and topic "u" (nobody did), opens recorded in order."""

    def __init__(self, partitions: int) -> None:
        super().__init__(partitions)
        self.other = TopicInfo("u", uuid.uuid4(), partitions)
        self.order: list[tuple[str, int]] = []

    def topics(self) -> dict[str, Any]:
        return {"t": self.info, "u": self.other}

    async def partition(self, topic: str, partition: int) -> ClosableLog:
        self.order.append((topic, partition))
        return await super().partition(topic, partition)


async def test_background_opens_wait_for_the_partitions_clients_wait_for(
        autojump_clock: trio.testing.MockClock) -> None:  # noqa: ARG001
    """A take-over opens the partitions clients asked about (and requests wait for) before
    the bundle's other partitions: on a loaded machine they shared its CPU and the clients'
    partitions took 0.5-1.8 s to open instead of ~0.2 s."""
    from gateway.cluster.bundle_placement import bundle_of
    from gateway.process.bundle_hooks import BundleHooks

    topics = TwoTopics(40)
    target = bundle_of("t", 0, 4)
    async with trio.open_nursery() as nursery:
        hooks = BundleHooks(topics, nursery)  # type: ignore[arg-type]
        hooks.ownership = GroupUnitOwnership()  # type: ignore[assignment]
        hooks.ownership.asked = {"t"}  # type: ignore[attr-defined,union-attr]
        groups = HeldGroups()
        groups.release.set()
        hooks.groups = groups  # type: ignore[assignment]
        await hooks.acquired(target)
    asked = [p for p in range(40) if bundle_of("t", p, 4) == target]
    others = [p for p in range(40) if bundle_of("u", p, 4) == target]
    assert len(topics.order) == len(asked) + len(others)
    assert {p for _, p in topics.order[:len(asked)]} == set(asked)
    assert all(topic == "t" for topic, _ in topics.order[:len(asked)])


class FlakyExtension:
    """An extension whose first `failures` loads fail, as a load does while its ledger's bookie
    (in a worker still starting) is away."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0
        self.loaded: list[int] = []

    async def acquired(self, bundle: int) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise ConnectionRefusedError("bookie away")
        self.loaded.append(bundle)

    async def releasing(self, bundle: int) -> None:
        pass


class FlakyGroups:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.started: list[int] = []

    async def start_partition(self, partition: int) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionRefusedError("bookie away")
        self.started.append(partition)

    async def stop_partition(self, partition: int) -> None:
        pass


async def test_a_load_that_failed_is_tried_again_while_the_bundle_stays(
        autojump_clock: trio.testing.MockClock) -> None:  # noqa: ARG001
    """A coordinator partition or an extension (RocketMQ offsets) whose load failed is loaded
    again in the background while the bundle stays here; before, it stayed unloaded until the
    bundle moved (groups NOT_COORDINATOR, RocketMQ queues not served, for good).  A released
    bundle's retries stop."""
    from gateway.process.bundle_hooks import LOAD_RETRY_MAX_S, BundleHooks

    extension, groups = FlakyExtension(failures=3), FlakyGroups(failures=2)
    async with trio.open_nursery() as nursery:
        hooks = BundleHooks(OpenLogs({}), nursery)  # type: ignore[arg-type]
        hooks.ownership = GroupUnitOwnership()  # type: ignore[assignment]
        hooks.groups = groups  # type: ignore[assignment]
        hooks.add_extension(extension)
        await hooks.acquired(1)
        assert extension.loaded == [] and groups.started == []
        await trio.sleep(4 * LOAD_RETRY_MAX_S)
        assert extension.loaded == [1] and extension.attempts == 4
        assert groups.started == [0]

        late = FlakyExtension(failures=100)
        hooks.add_extension(late)
        await hooks.acquired(2)
        await hooks.releasing(2)
        tried = late.attempts
        await trio.sleep(4 * LOAD_RETRY_MAX_S)
        assert late.attempts == tried  # released: not tried again


class CoordinatorUnits:
    def __init__(self, local: bool) -> None:
        self.local = local

    def coordinator_unit(self, key_type: int, key: str) -> tuple[str, int]:
        return "__consumer_offsets", 3

    def is_local(self, topic: str, partition: int) -> bool:
        return self.local


async def test_a_group_of_an_owned_partition_not_loaded_yet_is_told_to_retry() -> None:
    """A group whose coordinator partition this broker owns but has not loaded (its load under
    way, or failed and tried again) gets COORDINATOR_LOAD_IN_PROGRESS, which clients retry, as
    from Kafka's loading coordinator; NOT_COORDINATOR (before) made confluent-kafka's
    committed() fail at once after a node restart.  Another broker's group: NOT_COORDINATOR."""
    from gateway.coordinator.group_partitions import ClusterGroupCoordinator
    from protocols.kafka.errors import ErrorCode
    from protocols.kafka.group_coordinator import GroupError

    async with trio.open_nursery() as nursery:
        for local, code in ((True, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                            (False, ErrorCode.NOT_COORDINATOR)):
            groups = ClusterGroupCoordinator(None, None, CoordinatorUnits(local),  # type: ignore[arg-type]
                                             nursery)
            with pytest.raises(GroupError) as raised:
                groups.fetch_offsets("g", None)
            assert raised.value.code == code
