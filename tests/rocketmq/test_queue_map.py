"""Queue maps (protocols/rocketmq/queue_map.py) and the routes the name server builds from them:
bundle b of a cluster is broker "<cluster>-b<b>" with the partitions of b as queues 0..k-1."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.cluster.bundle_placement import bundle_of, is_bundle_pinned
from protocols.rocketmq.codec import make_request
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.name_server import NameServer, NameServerConfig
from protocols.rocketmq.queue_map import BrokerEndpoint, BundleQueueMap, SingleBrokerQueueMap
from protocols.rocketmq.request_codes import RequestCode as RC


def cluster_map(bundles: int, owned: dict[int, str]) -> BundleQueueMap:
    """`owned`: bundle -> host of its owner (base port 20000); others have no live owner."""
    return BundleQueueMap("C", bundles, bundle_of,
                          lambda b: f"{owned[b]}:{20000 + b}" if b in owned else None)


@given(st.text("abcxyz-_", min_size=1, max_size=12), st.integers(1, 40), st.integers(1, 9))
def test_every_partition_is_one_queue_of_one_bundle(topic: str, partitions: int,
                                                    bundles: int) -> None:
    qm = cluster_map(bundles, {})
    seen: list[int] = []
    for b in range(bundles):
        owned = qm.partitions_in_bundle(topic, partitions, b)
        assert list(owned) == sorted(owned)
        for q, p in enumerate(owned):
            assert bundle_of(topic, p, bundles) == b
            assert qm.partition_of(topic, partitions, b, q) == p
            assert qm.queue_of(topic, partitions, p) == (b, q)
        assert qm.partition_of(topic, partitions, b, len(owned)) is None
        assert qm.partition_of(topic, partitions, b, -1) is None
        seen += owned
    assert sorted(seen) == list(range(partitions))


@given(st.text("abcxyz", min_size=1, max_size=8), st.integers(1, 20), st.integers(0, 20),
       st.integers(1, 9))
def test_adding_partitions_keeps_existing_queue_ids(topic: str, before: int, added: int,
                                                    bundles: int) -> None:
    qm = cluster_map(bundles, {})
    for b in range(bundles):
        old = qm.partitions_in_bundle(topic, before, b)
        new = qm.partitions_in_bundle(topic, before + added, b)
        assert new[:len(old)] == old


def test_internal_topics_are_pinned_to_bundle_p_mod_b() -> None:
    for name in (".RETRY.cg", ".DLQ.cg", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"):
        assert is_bundle_pinned(name)
        assert [bundle_of(name, p, 4) for p in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert not is_bundle_pinned("orders")
    qm = cluster_map(4, {})
    assert [qm.partition_of(".RETRY.cg", 4, b, 0) for b in range(4)] == [0, 1, 2, 3]


def test_cluster_queue_nums_round_up_to_a_multiple_of_bundles() -> None:
    qm = cluster_map(4, {})
    assert [qm.cluster_queue_nums(n) for n in (0, 1, 4, 5, 8)] == [4, 4, 4, 8, 8]
    assert all(qm.queue_count("t", 8, b) == 2 for b in range(4))
    assert qm.cluster_partitions("orders", 5) == 8
    pinning = BundleQueueMap("C", 4, bundle_of, lambda b: None, is_bundle_pinned)
    assert pinning.cluster_partitions("SCHEDULE_TOPIC_XXXX", 19) == 76
    assert [pinning.partition_of("SCHEDULE_TOPIC_XXXX", 76, 2, q) for q in range(3)] == [2, 6, 10]
    assert pinning.queue_count("SCHEDULE_TOPIC_XXXX", 76, 3) == 19
    assert qm.bundle_of_broker_name("C-b3") == 3
    assert qm.bundle_of_broker_name("C-b4") is None and qm.bundle_of_broker_name("X-b1") is None


class Catalogue:
    """The part of a topic service the name server reads."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self._topics = {n: _Info(n, p) for n, p in partitions.items()}

    def topics(self) -> dict[str, _Info]:
        return dict(self._topics)

    async def refresh_topic(self, name: str) -> _Info | None:
        return self._topics.get(name)


class _Info:
    def __init__(self, name: str, partitions: int) -> None:
        self.name, self.partitions = name, partitions
        self.configs: dict[str, str] = {}


async def route_of(ns: NameServer, topic: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = await ns.handle(make_request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    return r.code, (json.loads(r.body) if r.body else {})


async def test_cluster_route_lists_the_bundles_holding_partitions_with_live_owners() -> None:
    bundles, partitions = 4, 6
    owned = {0: "10.0.0.1", 1: "10.0.0.2", 2: "10.0.0.2"}  # bundle 3: owner not live
    qm = cluster_map(bundles, owned)
    ns = NameServer(Catalogue({"orders": partitions, ".RETRY.g": 4}),  # type: ignore[arg-type]
                    list, NameServerConfig(True, 4), queue_map=qm)
    code, route = await route_of(ns, "orders")
    assert code == ResponseCode.SUCCESS
    want = {f"C-b{b}": qm.queue_count("orders", partitions, b) for b in owned
            if qm.queue_count("orders", partitions, b)}
    assert {q["brokerName"]: q["writeQueueNums"] for q in route["queueDatas"]} == want
    assert all(q["readQueueNums"] == q["writeQueueNums"] for q in route["queueDatas"])
    assert {d["brokerName"]: d["brokerAddrs"] for d in route["brokerDatas"]} == {
        f"C-b{b}": {"0": f"{owned[b]}:{20000 + b}"} for b in owned if f"C-b{b}" in want}
    assert want  # six partitions over four bundles: some of the live ones hold some
    assert all(d["cluster"] == "C" for d in route["brokerDatas"])

    code, route = await route_of(ns, "%RETRY%g")  # storage name .RETRY.g: pinned
    assert {q["brokerName"]: q["writeQueueNums"] for q in route["queueDatas"]} == {
        "C-b0": 1, "C-b1": 1, "C-b2": 1}

    code, route = await route_of(ns, "TBW102")
    assert {q["brokerName"]: q["writeQueueNums"] for q in route["queueDatas"]} == {
        "C-b0": 1, "C-b1": 1, "C-b2": 1}

    r = await ns.handle(make_request(RC.GET_BROKER_CLUSTER_INFO))
    info = json.loads(r.body)
    assert info["clusterAddrTable"] == {"C": ["C-b0", "C-b1", "C-b2"]}
    assert info["brokerAddrTable"]["C-b2"]["brokerAddrs"] == {"0": "10.0.0.2:20002"}


async def test_no_live_owner_means_no_route() -> None:
    ns = NameServer(Catalogue({"orders": 2}), list,  # type: ignore[arg-type]
                    NameServerConfig(True, 4), queue_map=cluster_map(4, {}))
    code, _ = await route_of(ns, "orders")
    assert code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.parametrize("partitions", [1, 3])
async def test_standalone_map_is_the_identity_on_one_broker(partitions: int) -> None:
    broker = BrokerEndpoint("DefaultCluster", "ledgerwire-broker", 0, "127.0.0.1:10911")
    ns = NameServer(Catalogue({"t": partitions}), lambda: [broker])  # type: ignore[arg-type]
    assert isinstance(ns.queue_map, SingleBrokerQueueMap)
    code, route = await route_of(ns, "t")
    assert route["queueDatas"] == [{"brokerName": "ledgerwire-broker",
                                    "readQueueNums": partitions, "writeQueueNums": partitions,
                                    "perm": 6, "topicSysFlag": 0}]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
