"""Cluster-mode RocketMQ in one process (gateway/rocketmq/cluster.py): one broker per bundle on
port base + b, queue ids translated to the bundle's partitions, per-bundle offsets, refusals
for bundles owned elsewhere, and delays, send-backs and transactions kept in their bundle.

Ownership is a stand-in here (this broker owns bundles 0 and 1 of 4, "broker 2" the rest);
tests/cluster/test_cluster_rocketmq.py runs the real thing with ZooKeeper."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from gateway.cluster.broker_registry import LIVE_BROKERS_PATH, ClusterLayout, endpoint_to_bytes
from gateway.cluster.bundle_placement import bundle_of
from gateway.config.settings import RocketMQConfig
from gateway.rocketmq.cluster import ClusterRocketMQ
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.metadata.store import MetadataStore
from protocols.kafka.broker_api import BrokerEndpoint
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.message_encoding import decode_stored_messages
from protocols.rocketmq.message_id import decode_offset_message_id
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.cluster.cluster_processes import free_port_range
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext

BUNDLES = 4
MINE = {0, 1}
FAST_LEVELS = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"

# The codes on which the Java 4.x producer resends a synchronous send (DefaultMQProducer's
# retryResponseCodes); any other failure answer fails the send at once.
JAVA_RESENDS = {17, 14, 1, 16, 204, 205}  # TOPIC_NOT_EXIST ... NOT_IN_CURRENT_UNIT


class StandInOwnership:
    def __init__(self) -> None:
        self.layout = ClusterLayout(bundles=BUNDLES)
        self.me = BrokerEndpoint(1, "127.0.0.1", 9092)
        self.other = BrokerEndpoint(2, "10.0.0.2", 9092)
        self.changed = trio.Event()
        self.lost: set[int] = set()  # bundles whose node this broker no longer holds
        self.registration_observers: list[Any] = []  # as OwnershipService: told each round

    def bundle_owner(self, bundle: int) -> BrokerEndpoint:
        return self.me if bundle in MINE else self.other

    def bundle_is_local(self, bundle: int) -> bool:
        return bundle in MINE

    def holds_bundle(self, bundle: int) -> bool:
        return bundle in MINE and bundle not in self.lost

    def is_local(self, topic: str, partition: int) -> bool:
        return bundle_of(topic, partition, BUNDLES) in MINE


@dataclass
class Side:
    rocketmq: ClusterRocketMQ
    topics: TopicService
    base: int

    def addr(self, bundle: int) -> str:
        return f"127.0.0.1:{self.base + bundle}"


@pytest.fixture
async def side(store: MetadataStore, bookkeeper: MemoryBookKeeper) -> AsyncIterator[Side]:
    factory = ManagedLedgerFactory(store, bookkeeper)
    topics = TopicService(store, factory, TopicServiceConfig())
    await topics.load()
    base = free_port_range(BUNDLES)
    config = RocketMQConfig(broker_listener=f"127.0.0.1:{base}",
                            name_server_listener="127.0.0.1:0", cluster_name="C",
                            delay_levels=FAST_LEVELS, max_reconsume_times=2,
                            transaction_check_timeout_s=0.5, transaction_check_interval_s=30)
    rocketmq = ClusterRocketMQ(config, topics, StandInOwnership(),  # type: ignore[arg-type]
                               store, factory, ManagedLedgerConfig())
    # broker 2's live node, as its OwnershipService registers it
    await store.create(f"{LIVE_BROKERS_PATH}/2", endpoint_to_bytes(
        BrokerEndpoint(2, "10.0.0.2", 9092), {"rocketmq": {"host": "10.0.0.2",
                                                           "base_port": 30000}}),
        make_parents=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rocketmq.run)
        for bundle in MINE:
            await rocketmq.acquired(bundle)
        await rocketmq.refresh_registrations()
        await rocketmq.serve(nursery)
        try:
            yield Side(rocketmq, topics, base)
        finally:
            await rocketmq.close()
            nursery.cancel_scope.cancel()
            await topics.close()


async def test_routes_ports_and_queue_translation(side: Side) -> None:
    await side.topics.create_topic("orders", 8)
    qm = side.rocketmq.queue_map
    route: Any = side.rocketmq.name_server.route_data("orders", 8)
    assert {d["brokerName"]: d["brokerAddrs"]["0"] for d in route["brokerDatas"]} == {
        "C-b0": side.addr(0), "C-b1": side.addr(1), "C-b2": "10.0.0.2:30002",
        "C-b3": "10.0.0.2:30003"}
    assert {q["brokerName"]: q["writeQueueNums"] for q in route["queueDatas"]} == {
        f"C-b{b}": 2 for b in range(BUNDLES)}

    client = await RawClient.connect(side.addr(1))
    r = await client.call(RC.SEND_MESSAGE_V2, send_ext("orders", {"TAGS": "a"}, queue_id=1),
                          b"hello")
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert r.ext_fields["queueId"] == "1" and r.ext_fields["queueOffset"] == "0"
    partition = qm.partition_of("orders", 8, 1, 1)
    assert partition is not None and bundle_of("orders", partition, BUNDLES) == 1
    assert (await side.topics.partition("orders", partition)).high_watermark == 1
    for other in set(range(8)) - {partition}:
        assert ("orders", other) not in side.topics.open_partitions() or \
            (await side.topics.partition("orders", other)).high_watermark == 0

    r = await client.call(RC.PULL_MESSAGE, pull_ext("orders", 1, 0))
    assert r.code == ResponseCode.SUCCESS, r.remark
    [m] = decode_stored_messages(r.body)
    assert (m.body, m.queue_id, m.queue_offset) == (b"hello", 1, 0)
    assert m.store_host == ("127.0.0.1", side.base + 1)

    # offsets: per bundle, keyed by the storage partition
    q = {"consumerGroup": "g", "topic": "orders", "queueId": 1}
    r = await client.call(RC.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": 1})
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await client.call(RC.QUERY_CONSUMER_OFFSET, q)
    assert r.ext_fields["offset"] == "1"
    store = side.rocketmq.offset_ledgers.store(1)
    assert store is not None and store.query("g", "orders", partition) == 1
    await client.aclose()


async def test_bundles_owned_elsewhere_are_refused_without_opening_them(side: Side) -> None:
    await side.topics.create_topic("orders", 8)
    client = await RawClient.connect(side.addr(2))
    r = await client.call(RC.SEND_MESSAGE_V2, send_ext("orders", {}, queue_id=0), b"x")
    # a code the Java 4.x producer resends on (to another bundle's queue)
    assert r.code in JAVA_RESENDS and "not served here" in (r.remark or ""), r.code
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
    r = await client.call(RC.PULL_MESSAGE, pull_ext("orders", 0, 0))
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
    r = await client.call(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "orders",
                                                      "queueId": 0, "commitOffset": 1})
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert not any(bundle_of(t, p, BUNDLES) not in MINE
                   for t, p in side.topics.open_partitions())
    await client.aclose()


async def test_auto_create_heartbeat_retry_topic_and_refusals(side: Side) -> None:
    client = await RawClient.connect(side.addr(0))
    # first send of a new topic through the TBW102 route: created with a multiple of bundles
    r = await client.call(RC.SEND_MESSAGE_V2, send_ext("fresh", {}, queue_id=0), b"first")
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert side.topics.topics()["fresh"].partitions == BUNDLES
    p = side.rocketmq.queue_map.partition_of("fresh", BUNDLES, 0, 0)
    assert p is not None and (await side.topics.partition("fresh", p)).high_watermark == 1

    hb = {"clientID": "A", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "cg", "consumeType": "CONSUME_PASSIVELY", "messageModel": 1,
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "fresh", "subString": "*", "tagsSet": [],
                                 "codeSet": [], "subVersion": 0, "classFilterMode": False,
                                 "expressionType": "TAG"}]}]}
    r = await client.call(RC.HEART_BEAT, None, json.dumps(hb).encode())
    assert r.code == ResponseCode.SUCCESS
    # the retry topic is bundle-pinned: one queue per bundle, partition b in bundle b
    assert side.topics.topics()[".RETRY.cg"].partitions == BUNDLES
    assert side.rocketmq.queue_map.partition_of(".RETRY.cg", BUNDLES, 1, 0) == 1
    # the client registry is shared by every port
    other = await RawClient.connect(side.addr(1))
    r = await other.call(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"})
    assert json.loads(r.body)["consumerIdList"] == ["A"]

    await client.aclose()
    await other.aclose()


async def test_delays_send_backs_and_transactions_stay_in_their_bundle(side: Side) -> None:
    await side.topics.create_topic("jobs", 8)
    c = await RawClient.connect(side.addr(1))
    start = trio.current_time()
    r = await c.call(RC.SEND_MESSAGE_V2, send_ext("jobs", {"DELAY": "2"}, queue_id=1), b"later")
    assert r.code == ResponseCode.SUCCESS, r.remark
    # SCHEDULE_TOPIC_XXXX: 18 levels + the timer queue in each bundle, pinned
    assert side.topics.topics()["SCHEDULE_TOPIC_XXXX"].partitions == 19 * BUNDLES
    r = await c.call(RC.PULL_MESSAGE, pull_ext("jobs", 1, 0))
    assert r.code == ResponseCode.PULL_NOT_FOUND
    r = await c.call(RC.PULL_MESSAGE, pull_ext("jobs", 1, 0, suspend_ms=8000))
    [later] = decode_stored_messages(r.body)
    assert later.body == b"later" and trio.current_time() - start >= 0.9
    # a consumer's send-back: delayed, then into the group's retry queue of this bundle
    r = await c.call(RC.CONSUMER_SEND_MSG_BACK, {
        "group": "G", "offset": later.commit_log_offset, "delayLevel": 1, "originMsgId": "X",
        "originTopic": "jobs", "unitMode": False, "maxReconsumeTimes": 2})
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await c.call(RC.PULL_MESSAGE, pull_ext("%RETRY%G", 0, 0, suspend_ms=8000))
    [retried] = decode_stored_messages(r.body)
    assert retried.body == b"later" and retried.reconsume_times == 1
    assert (await side.topics.partition(".RETRY.G", 1)).high_watermark == 1
    # a transaction: invisible until committed, then in its real queue of this bundle
    half = send_ext("jobs", {"UNIQ_KEY": "H1"}, queue_id=0)
    half["f"] = 4  # sysFlag: transaction prepared
    r = await c.call(RC.SEND_MESSAGE_V2, half, b"half")
    assert r.code == ResponseCode.SUCCESS, r.remark
    _, _, half_offset = decode_offset_message_id(r.ext_fields["msgId"])
    assert (await side.topics.partition("RMQ_SYS_TRANS_HALF_TOPIC", 1)).high_watermark == 1
    r = await c.call(RC.PULL_MESSAGE, pull_ext("jobs", 0, 0))
    assert r.code == ResponseCode.PULL_NOT_FOUND
    r = await c.call(RC.END_TRANSACTION, {"producerGroup": "pg", "commitLogOffset": half_offset,
                                          "commitOrRollback": 8})
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await c.call(RC.PULL_MESSAGE, pull_ext("jobs", 0, 0, suspend_ms=5000))
    [committed] = decode_stored_messages(r.body)
    assert committed.body == b"half"
    # nothing of this went to a bundle owned elsewhere
    assert not any(bundle_of(t, p, BUNDLES) not in MINE
                   for t, p in side.topics.open_partitions())
    await c.aclose()


async def test_check_back_goes_on_the_connection_to_the_half_messages_bundle(side: Side) -> None:
    await side.topics.create_topic("tx", 8)
    producer_hb = json.dumps({"clientID": "P", "producerDataSet": [{"groupName": "pg"}],
                              "consumerDataSet": []}).encode()
    to_b0 = await RawClient.connect(side.addr(0))
    to_b1 = await RawClient.connect(side.addr(1))
    for conn in (to_b1, to_b0):  # the shared registry keeps the last one: bundle 0's
        r = await conn.call(RC.HEART_BEAT, None, producer_hb)
        assert r.code == ResponseCode.SUCCESS
    half = send_ext("tx", {"UNIQ_KEY": "H9"}, queue_id=0)
    half["f"] = 4
    r = await to_b1.call(RC.SEND_MESSAGE_V2, half, b"undecided")
    assert r.code == ResponseCode.SUCCESS, r.remark
    check = await to_b1.receive(wait_s=10)
    assert check is not None and check.code == RC.CHECK_TRANSACTION_STATE
    assert check.ext_fields["transactionId"] == "H9"
    # the producer answers on that connection, i.e. to bundle 1, which holds the half
    r = await to_b1.call(RC.END_TRANSACTION, {"producerGroup": "pg", "commitLogOffset":
                                              check.ext_fields["commitLogOffset"],
                                              "commitOrRollback": 8})
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = await to_b1.call(RC.PULL_MESSAGE, pull_ext("tx", 0, 0, suspend_ms=5000))
    assert [m.body for m in decode_stored_messages(r.body)] == [b"undecided"]
    await to_b0.aclose()
    await to_b1.aclose()


async def test_update_topic_gives_every_bundle_the_queues_asked_for(side: Side) -> None:
    await side.topics.create_topic("grow", 6)  # bundles hold 2, 1, 1, 2 queues
    assert side.rocketmq.queue_map.queue_count("grow", 6, 1) == 1
    c = await RawClient.connect(side.addr(1))
    r = await c.call(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "grow", "readQueueNums": 2,
                                                  "writeQueueNums": 2, "perm": 6})
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert side.topics.topics()["grow"].partitions == 8
    assert all(side.rocketmq.queue_map.queue_count("grow", 8, b) == 2 for b in range(BUNDLES))
    await c.aclose()


async def test_a_release_racing_an_acquisition_leaves_nothing_loaded(side: Side) -> None:
    """A lost ZooKeeper session releases bundles from its own task, possibly while the
    reconcile task is still acquiring one: the bundle must end with no offsets store and no
    services (else they would serve, stale, if it comes back), and a later acquisition loads
    the offsets afresh."""
    rocketmq, ownership = side.rocketmq, side.rocketmq.ownership
    await rocketmq.releasing(1)
    store_before = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rocketmq.acquired, 1)
        await trio.lowlevel.checkpoint()  # the acquisition is under way
        ownership.lost.add(1)  # type: ignore[attr-defined]
        await rocketmq.releasing(1)
    assert rocketmq.offset_ledgers.store(1) is None
    assert 1 not in rocketmq._services
    ownership.lost.discard(1)  # type: ignore[attr-defined]
    await rocketmq.acquired(1)
    store_before = rocketmq.offset_ledgers.store(1)
    await rocketmq.acquired(1)  # acquiring again reloads rather than reusing the old store
    assert rocketmq.offset_ledgers.store(1) is not store_before is not None
