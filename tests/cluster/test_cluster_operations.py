"""The operations side of cluster brokers (gateway/process/cluster_services.py): admin HTTP API,
/ready,
/metrics, namespace policies, SASL, and retention that acts only where a broker may.

Unit tests first (no processes); then one real cluster for the whole module: ZooKeeper, three
bookies and two `ledgerwire broker` processes on SASL_PLAINTEXT, each with its own admin port.
Traffic comes from confluent-kafka; /metrics is parsed with prometheus_client's parser.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from gateway.cluster.bundle_placement import GROUP_TOPIC, coordinator_partition
from gateway.process.cluster_services import (
    OwnedTopics,
    combine_floors,
    combine_ttl_first_live,
    encode_floors,
    keep_running,
    local_floors,
)
from gateway.topics.namespaces import NamespaceRegistry
from gateway.topics.retention_policies import RetentionPolicies
from protocols.kafka.errors import NotLeaderOrFollowerError
from protocols.kafka.group_model import CommittedOffset
from tests.cluster.cluster_processes import Cluster, Process, free_port
from tests.operations.conftest import ops  # noqa: F401  (fixture; its users say F811)
from tests.operations.ops_stack import OpsStack, batch

USER, PASSWORD = "admin", "admin-secret"
GROUP_PARTITIONS = 8  # `cluster init` default

# --- units ----------------------------------------------------------------------------------


def test_floors_need_every_coordinator_partition() -> None:
    a = encode_floors(1, range(0, 4), {("t", 0): 7, ("t", 1): 3})
    b = encode_floors(2, range(4, 8), {("t", 0): 5})
    assert combine_floors([a, b], 8) == {("t", 0): 5, ("t", 1): 3}
    assert combine_floors([a], 8) is None  # groups of partitions 4..7 unknown: delete nothing
    assert combine_floors([a, b, b"{not json"], 8) is None
    assert combine_floors([a, json.dumps({"format": 99}).encode(), b], 8) is None
    assert local_floors({"g1": {("t", 0): CommittedOffset(9)},
                         "g2": {("t", 0): CommittedOffset(4), ("u", 2): CommittedOffset(-1)}}) \
        == {("t", 0): 4}
    ttl = [encode_floors(1, [], {}, {("t", 0): 40}), encode_floors(2, [], {}, {("t", 0): 30,
                                                                             ("u", 1): 2})]
    assert combine_ttl_first_live([*ttl, b"junk"]) == {("t", 0): 30, ("u", 1): 2}


class FakeOwnership:
    def __init__(self, local: set[tuple[str, int]]) -> None:
        self.local = local

    def is_local(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.local

    def owner_of(self, topic: str, partition: int) -> Any:
        return None


class FakeScope:
    def __init__(self, owned: set[tuple[str, int]],
                 floors: dict[tuple[str, int], int] | None) -> None:
        self.owned = owned
        self.floors = floors

    def owns(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.owned

    async def committed_floors(self) -> dict[tuple[str, int], int] | None:
        return self.floors


async def _consumed_topic(ops: OpsStack, topic: str) -> Any:  # noqa: F811
    await ops.namespaces.create_tenant("c")
    await ops.namespaces.create_namespace("c/gone", {"retention_time_minutes": 0})
    await ops.topics.create_topic(topic, 1)
    plog = await ops.topics.partition(topic, 0)
    for _ in range(6):  # 2 entries per ledger: ledgers start at offsets 0, 4, 8
        await plog.append(batch(2))
    await ops.coordinator.commit_offsets(group_id="local", member_id="", generation_id=-1,
                                         offsets={(topic, 0): CommittedOffset(12)})
    return plog


async def test_retention_scope_limits_what_a_cluster_broker_deletes(ops: OpsStack) -> None:  # noqa: F811
    topic = "c.gone.events"
    plog = await _consumed_topic(ops, topic)
    key = (topic, 0)

    def policies(scope: FakeScope) -> RetentionPolicies:
        return RetentionPolicies(ops.topics, ops.namespaces, ops.coordinator, scope=scope)

    # owned elsewhere: untouched, whatever the groups committed
    assert (await policies(FakeScope(set(), {})).apply_once()).ledgers_deleted == {}
    # some coordinator partitions unaccounted for: their groups may not have consumed
    assert (await policies(FakeScope({key}, None)).apply_once()).ledgers_deleted == {}
    assert plog.log_start_offset == 0
    # a group coordinated by another broker is at 5: only [0, 4) goes
    done = await policies(FakeScope({key}, {key: 5})).apply_once()
    assert done.ledgers_deleted == {f"{topic}-0": 1} and plog.log_start_offset == 4
    await policies(FakeScope({key}, {key: 12})).apply_once()
    assert plog.log_start_offset == 12


async def test_owned_topics_never_open_a_partition_owned_elsewhere(ops: OpsStack) -> None:  # noqa: F811
    await ops.topics.create_topic("split", 2)
    await ops.topics.partition("split", 0)
    await ops.topics.partition("split", 1)
    owned = OwnedTopics(ops.topics, FakeOwnership({("split", 0)}))  # type: ignore[arg-type]
    assert set(owned.open_partitions()) == {("split", 0)}
    assert await owned.partition("split", 0) is not None
    with pytest.raises(NotLeaderOrFollowerError):
        await owned.partition("split", 1)
    assert "split" in owned.topics()  # everything else is the topic service's


class ReapplyCounter:
    def __init__(self) -> None:
        self.calls = 0
        self.reapplied = trio.Event()

    async def reapply_configs(self) -> None:
        self.calls += 1
        self.reapplied.set()


async def test_namespaces_made_elsewhere_are_followed(ops: OpsStack) -> None:  # noqa: F811
    mine = NamespaceRegistry(ops.store)
    await mine.load()
    topics = ReapplyCounter()
    async with trio.open_nursery() as nursery:
        # a long poll interval: only the watches can be this quick
        nursery.start_soon(partial(mine.follow, topics.reapply_configs, refresh_interval_s=60.0))
        await trio.sleep(0.1)
        await ops.namespaces.create_tenant("elsewhere")
        await ops.namespaces.create_namespace("elsewhere/ns", {"message_ttl_seconds": 5})
        with trio.fail_after(5):
            await topics.reapplied.wait()  # open partitions get the new policies
            while "elsewhere/ns" not in mine.namespaces():
                topics.reapplied = trio.Event()
                await topics.reapplied.wait()
        assert mine.policies("elsewhere/ns").message_ttl_seconds == 5
        nursery.cancel_scope.cancel()


async def test_keep_running_restarts_a_failed_loop(autojump_clock: Any) -> None:
    runs: list[int] = []

    async def flaky() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise RuntimeError("metadata session lost")

    await keep_running("flaky", flaky, retry_s=1.0)
    assert len(runs) == 3


# --- a real cluster ---------------------------------------------------------------------------

def http(cluster: Cluster, node_id: int, method: str, path: str,
         body: Any = None, *, user: str | None = USER,
         password: str = PASSWORD) -> tuple[int, Any]:
    """An admin API call, by default as the super user (user=None: no credentials)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {}
    if user is not None:
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {pair}"
    request = urllib.request.Request(cluster.admin_url(node_id) + path, data=data, method=method,
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, payload, ctype = response.status, response.read(), \
                response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        status, payload, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "")
    return status, json.loads(payload) if "json" in ctype else payload.decode()


def ok(cluster: Cluster, node_id: int, method: str, path: str, body: Any = None) -> Any:
    status, answer = http(cluster, node_id, method, path, body)
    assert status in (200, 201), (status, answer)
    return answer


def metrics(cluster: Cluster, node_id: int) -> dict[tuple[str, tuple[tuple[str, str], ...]],
                                                   float]:
    status, text = http(cluster, node_id, "GET", "/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def client_config(cluster: Cluster, password: str = PASSWORD) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": USER, "sasl.password": password}


def produce(cluster: Cluster, topic: str, count: int, size: int = 100,
            one_per_batch: bool = False) -> None:
    p = Producer({**client_config(cluster), "linger.ms": 0, "acks": "all"})
    for i in range(count):
        p.produce(topic, key=b"k%d" % i, value=b"v" * size)
        p.poll(0)
        if one_per_batch:
            assert p.flush(30) == 0
    assert p.flush(30) == 0


def commit(cluster: Cluster, group: str, topic: str, offset: int) -> None:
    c = Consumer({**client_config(cluster), "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def other(node_id: int) -> int:
    return 2 if node_id == 1 else 1


def wait_for(what: str, check: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base: Path = tmp_path_factory.mktemp("cluster-ops")
    (base / "users.toml").write_text(
        f'[[users]]\nname = "{USER}"\npassword = "{PASSWORD}"\n')
    (base / "broker.toml").write_text(
        '[kafka]\nsecurity_protocol = "SASL_PLAINTEXT"\n'
        f'[security]\nsuper_users = ["User:{USER}"]\nusers_file = "{base / "users.toml"}"\n')
    with Cluster(base, bookies=3, brokers=2, partitions=1,
                 broker_args=["--config", str(base / "broker.toml")]) as c:
        yield c



@pytest.mark.slow
@pytest.mark.integration
def test_health_ready_brokers_and_bookies_on_both_brokers(cluster: Cluster) -> None:
    bookie_ids = sorted(b.bookie_id for b in cluster.bookies)  # type: ignore[attr-defined]
    for node_id in (1, 2):
        assert http(cluster, node_id, "GET", "/health") == (200, {"status": "ok"})
        assert http(cluster, node_id, "GET", "/ready") == (200, {"ready": True})
        brokers = ok(cluster, node_id, "GET", "/admin/v1/brokers")
        assert [b["broker_id"] for b in brokers] == [1, 2]
        assert sum(len(b["bundles"]) for b in brokers) == cluster.bundles
        bookies = ok(cluster, node_id, "GET", "/admin/v1/bookies")
        assert sorted(b["bookie"] for b in bookies) == bookie_ids
        assert all(b["state"] == "available" for b in bookies)


@pytest.mark.slow
@pytest.mark.integration
def test_cluster_brokers_refuse_admin_calls_without_the_shared_credentials(
        cluster: Cluster) -> None:
    """Each broker's admin listener checks the users kept in ZooKeeper, as its Kafka listener
    does: no credentials or a wrong password get 401 on every kind of route, the shared super
    user passes on both brokers."""
    routes = [("GET", "/admin/v1/topics"), ("GET", "/admin/v1/brokers"),
              ("GET", "/admin/v1/groups"), ("GET", "/admin/v1/tenants"),
              ("PUT", "/admin/v1/topics/anon-topic"), ("DELETE", "/admin/v1/topics/anon-topic"),
              ("POST", "/admin/v1/retention/run"), ("POST", "/admin/v1/bookies/gc"),
              ("GET", "/metrics"), ("GET", "/"), ("GET", "/console/topics")]
    for node_id in (1, 2):
        for method, path in routes:
            body: dict[str, Any] | None = {} if method in ("PUT", "POST") else None
            assert http(cluster, node_id, method, path, body, user=None)[0] == 401, path
            assert http(cluster, node_id, method, path, body, password="wrong")[0] == 401, path
        assert http(cluster, node_id, "GET", "/health", user=None)[0] == 200
        assert http(cluster, node_id, "GET", "/admin/v1/brokers")[0] == 200
        # the console with the shared credentials: this broker's view of the cluster
        status, page = http(cluster, node_id, "GET", "/")
        assert status == 200 and "Under-replicated ledgers" in page
        assert "available" in page  # the bookies registered in ZooKeeper
        status, page = http(cluster, node_id, "GET", "/console/groups")
        assert status == 200 and "Consumer groups" in page


@pytest.mark.slow
@pytest.mark.integration
def test_ready_only_once_registered(cluster: Cluster) -> None:
    """A broker whose id is still registered (here: by a live broker) waits to register: its
    admin API answers /health but /ready stays 503."""
    admin_port = free_port()
    args = ["broker", "--metadata", cluster.metadata_url, "--broker-id", "1",
            "--kafka-listener", f"127.0.0.1:{free_port()}", "--log-format", "text",
            "--data-dir", str(cluster.base / "duplicate"), "--admin-listener",
            f"127.0.0.1:{admin_port}", *cluster.broker_args]
    duplicate = Process("duplicate-1", args, cluster.base / "duplicate.log", b"ready on")
    duplicate.start(wait=False)
    try:
        url = f"http://127.0.0.1:{admin_port}"

        def health() -> bool:
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for("the duplicate's admin API", health)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "/ready", timeout=5)
        assert refused.value.code == 503
        assert json.loads(refused.value.read()) == {"ready": False}
        assert b"still registered" in (cluster.base / "duplicate.log").read_bytes()
    finally:
        duplicate.kill()
    assert http(cluster, 1, "GET", "/ready") == (200, {"ready": True})


@pytest.mark.slow
@pytest.mark.integration
def test_sasl_plain_refuses_a_wrong_password(cluster: Cluster) -> None:
    p = Producer({**client_config(cluster, "wrong"), "socket.timeout.ms": 5000})
    with pytest.raises(KafkaException):
        p.list_topics(timeout=5)
    good = Producer(client_config(cluster)).list_topics(timeout=10)
    assert len(good.brokers) == 2


@pytest.mark.slow
@pytest.mark.integration
def test_metrics_count_produces_on_the_owning_broker(cluster: Cluster) -> None:
    topic = "metered"
    ok(cluster, 1, "PUT", f"/admin/v1/topics/{topic}", {"partitions": 1})
    owner = cluster.partition_owner(topic, 0)
    assert owner in (1, 2)
    before = {n: metrics(cluster, n) for n in (1, 2)}
    produce(cluster, topic, 30)
    after = {n: metrics(cluster, n) for n in (1, 2)}
    key = ("ledgerwire_topic_produce_messages_total", (("topic", topic),))
    assert after[owner][key] - before[owner].get(key, 0) == 30
    assert after[other(owner)].get(key, 0) == 0
    assert after[owner][("ledgerwire_partition_log_end_offset",
                         (("partition", "0"), ("topic", topic)))] == 30
    # a partition is measured only by its owner
    assert ("ledgerwire_partition_log_end_offset",
            (("partition", "0"), ("topic", topic))) not in after[other(owner)]
    for n in (1, 2):
        assert ("ledgerwire_under_replicated_ledgers", ()) in after[n]


@pytest.mark.slow
@pytest.mark.integration
def test_namespace_quorum_policy_reaches_the_owner(cluster: Cluster) -> None:
    ok(cluster, 1, "PUT", "/admin/v1/tenants/repl", {})
    ok(cluster, 1, "PUT", "/admin/v1/namespaces/repl/two",
       {"policies": {"ensemble_size": 2, "write_quorum": 2, "ack_quorum": 2}})
    wait_for("broker 2 to see repl/two",  # followed through the metadata store
             lambda: "repl/two" in ok(cluster, 2, "GET", "/admin/v1/namespaces"))
    topic = "repl.two.t"
    ok(cluster, 2, "PUT", f"/admin/v1/topics/{topic}", {"partitions": 1})
    produce(cluster, topic, 10)
    owner = cluster.partition_owner(topic, 0)
    assert owner is not None
    (part,) = ok(cluster, owner, "GET", f"/admin/v1/topics/{topic}")["partitions"]
    assert part["owner"] == owner and part["ledgers"]
    assert part["managed_ledger"] == f"repl/two/{topic}-0"
    assert all((x["ensemble_size"], x["write_quorum"], x["ack_quorum"]) == (2, 2, 2)
               and len(set(x["ensemble"])) == 2 for x in part["ledgers"])
    (remote,) = ok(cluster, other(owner), "GET", f"/admin/v1/topics/{topic}")["partitions"]
    assert remote["owner"] == owner and remote["ledgers"] is None  # not opened there
    ok(cluster, 1, "PUT", "/admin/v1/topics/default-quorum", {"partitions": 1})
    produce(cluster, "default-quorum", 1)
    d_owner = cluster.partition_owner("default-quorum", 0)
    assert d_owner is not None
    (d,) = ok(cluster, d_owner, "GET", "/admin/v1/topics/default-quorum")["partitions"]
    assert d["ledgers"][0]["ensemble_size"] == 3  # the cluster default (3/2/2)


def _group_coordinated_by(cluster: Cluster, node_id: int, prefix: str) -> str:
    for i in range(200):
        group = f"{prefix}-{i}"
        unit = coordinator_partition(group, GROUP_PARTITIONS)
        if cluster.partition_owner(GROUP_TOPIC, unit) == node_id:
            return group
    raise AssertionError(f"no group id coordinated by broker {node_id}")


@pytest.mark.slow
@pytest.mark.integration
def test_retention_deletes_consumed_ledgers_only_on_the_owner(cluster: Cluster) -> None:
    ok(cluster, 1, "PUT", "/admin/v1/tenants/pulsar", {})
    ok(cluster, 1, "PUT", "/admin/v1/namespaces/pulsar/noretention",
       {"policies": {"retention_time_minutes": 0}})
    wait_for("broker 2 to see pulsar/noretention",
             lambda: "pulsar/noretention" in ok(cluster, 2, "GET", "/admin/v1/namespaces"))
    topic = "pulsar.noretention.events"
    ok(cluster, 1, "PUT", f"/admin/v1/topics/{topic}",
       {"partitions": 1, "configs": {"segment.bytes": "15000"}})
    produce(cluster, topic, 20, size=10_000, one_per_batch=True)  # ~2 entries per ledger
    owner = cluster.partition_owner(topic, 0)
    assert owner is not None
    remote = other(owner)
    ledgers = ok(cluster, owner, "GET", f"/admin/v1/topics/{topic}")["partitions"][0]["ledgers"]
    assert len(ledgers) >= 5
    # One group coordinated by each broker; the one the owner cannot see lags at 10.
    fast = _group_coordinated_by(cluster, owner, "fast")
    lagging = _group_coordinated_by(cluster, remote, "lagging")
    commit(cluster, fast, topic, 20)
    commit(cluster, lagging, topic, 10)
    assert fast in [g["group"] for g in ok(cluster, owner, "GET", "/admin/v1/groups")]
    assert fast not in [g["group"] for g in ok(cluster, remote, "GET", "/admin/v1/groups")]
    assert lagging in [g["group"] for g in ok(cluster, remote, "GET", "/admin/v1/groups")]

    # The remote broker owns nothing of the topic: it deletes nothing (and publishes its
    # groups' committed floor); the owner then cuts below the lagging group only.
    assert ok(cluster, remote, "POST", "/admin/v1/retention/run", {})["ledgers_deleted"] == {}
    done = ok(cluster, owner, "POST", "/admin/v1/retention/run", {})
    assert done["ledgers_deleted"].get(f"{topic}-0", 0) >= 1, done
    part = ok(cluster, owner, "GET", f"/admin/v1/topics/{topic}")["partitions"][0]
    assert 0 < part["log_start_offset"] <= 10, part
    commit(cluster, lagging, topic, 20)
    ok(cluster, remote, "POST", "/admin/v1/retention/run", {})
    ok(cluster, owner, "POST", "/admin/v1/retention/run", {})
    part = ok(cluster, owner, "GET", f"/admin/v1/topics/{topic}")["partitions"][0]
    assert part["log_start_offset"] > 10 and len(part["ledgers"]) < len(ledgers), part


@pytest.mark.slow
@pytest.mark.integration
def test_message_ttl_moves_a_group_coordinated_by_another_broker(cluster: Cluster) -> None:
    ok(cluster, 1, "PUT", "/admin/v1/tenants/ttl", {})
    ok(cluster, 1, "PUT", "/admin/v1/namespaces/ttl/short",
       {"policies": {"message_ttl_seconds": 1}})
    wait_for("broker 2 to see ttl/short",
             lambda: "ttl/short" in ok(cluster, 2, "GET", "/admin/v1/namespaces"))
    topic = "ttl.short.events"
    ok(cluster, 1, "PUT", f"/admin/v1/topics/{topic}", {"partitions": 1})
    produce(cluster, topic, 12)
    owner = cluster.partition_owner(topic, 0)
    assert owner is not None
    remote = other(owner)
    group = _group_coordinated_by(cluster, remote, "ttl-reader")
    commit(cluster, group, topic, 2)
    time.sleep(1.5)  # every message is now older than the TTL
    ok(cluster, owner, "POST", "/admin/v1/retention/run", {})  # publishes the first live offset
    ok(cluster, remote, "POST", "/admin/v1/retention/run", {})  # moves its group up to it
    described = ok(cluster, remote, "GET", f"/admin/v1/groups/{group}")
    assert [p["committed_offset"] for p in described["partitions"]] == [12], described
