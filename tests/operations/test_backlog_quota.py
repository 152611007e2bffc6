"""Backlog quotas (gateway/topics/backlog_quota.py): in-process passes, the produce-path gate, and
one
real `ledgerwire standalone` with a confluent-kafka producer and the admin CLI."""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio
from confluent_kafka import KafkaError, Producer

from gateway.topics.backlog_quota import (
    BacklogQuotas,
    LedgerSpan,
    QuotaRefusal,
    estimate_backlog_bytes,
    eviction_offset,
)
from gateway.topics.namespaces import NamespaceError, NamespacePolicies
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.metadata import open_store
from protocols.kafka import record_batch as rb
from protocols.kafka.group_model import CommittedOffset
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.kafka_server.conftest import running_stack
from tests.kafka_server.test_kafka_handlers_wire import produce as wire_produce
from tests.operations.ops_stack import OpsStack
from tests.rocketmq.conftest import start_stack
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import send_ext
from tests.support.standalone import Standalone

BIG = 100_000  # bytes of value per batch: 11 batches cross a 1 MB quota


def test_backlog_estimate_and_eviction_offset() -> None:
    spans = [LedgerSpan(0, 10, 1000), LedgerSpan(10, 20, 1000), LedgerSpan(20, 24, 400)]
    assert estimate_backlog_bytes(spans, 0) == 2400
    assert estimate_backlog_bytes(spans, 5) == 1900  # half of the first ledger
    assert estimate_backlog_bytes(spans, 20) == 400
    assert estimate_backlog_bytes(spans, 24) == 0
    assert eviction_offset(spans, 5000) is None  # everything fits
    assert eviction_offset(spans, 1400) == 10  # whole ledgers
    assert eviction_offset(spans, 900) == 15  # pro rata inside [10, 20)
    for limit in (0, 1, 399, 900, 1399, 2399):
        offset = eviction_offset(spans, limit)
        assert offset is not None and estimate_backlog_bytes(spans, offset) <= limit


def test_policy_values_are_checked() -> None:
    pol = NamespacePolicies.from_json({"backlog_quota_mb": 1,
                                       "backlog_quota_policy": "producer_exception"})
    assert pol.backlog_quota_policy == "producer_exception"
    with pytest.raises(NamespaceError, match="must be one of"):
        NamespacePolicies.from_json({"backlog_quota_policy": "drop_everything"})
    with pytest.raises(NamespaceError, match="integer"):
        NamespacePolicies.from_json({"backlog_quota_time_seconds": "10"})


def quotas_for(ops: OpsStack, hold_timeout_s: float = 5.0) -> BacklogQuotas:
    quotas = BacklogQuotas(ops.topics, ops.namespaces, ops.coordinator,
                           now_ms=lambda: ops.clock_ms[0], hold_timeout_s=hold_timeout_s)
    ops.topics.backlog_quotas = quotas
    return quotas


async def namespace_topic(ops: OpsStack, name: str, policies: dict[str, object]) -> str:
    if "t" not in ops.namespaces.tenants():
        await ops.namespaces.create_tenant("t")
    await ops.namespaces.create_namespace(f"t/{name}", policies)
    topic = f"t.{name}.events"
    await ops.topics.create_topic(topic, 1)
    return topic


async def fill(ops: OpsStack, topic: str, batches: int, *, ts: int = 1_000,
               size: int = BIG) -> int:
    plog = await ops.topics.partition(topic, 0)
    for i in range(batches):
        await plog.append(rb.build_batch([(None, b"%d" % i + b"x" * size)], timestamp_ms=ts))
    return plog.high_watermark


async def commit(ops: OpsStack, group: str, topic: str, offset: int) -> None:
    await ops.coordinator.commit_offsets(group_id=group, member_id="", generation_id=-1,
                                         offsets={(topic, 0): CommittedOffset(offset)})


async def test_producer_exception_refuses_until_the_group_catches_up(ops: OpsStack) -> None:
    quotas = quotas_for(ops)
    topic = await namespace_topic(ops, "strict", {"backlog_quota_mb": 1,
                                                  "backlog_quota_policy": "producer_exception"})
    await commit(ops, "slow", topic, 0)
    await fill(ops, topic, 5)
    await quotas.apply_once()
    assert await quotas.admit(topic, 0) is None  # 0.5 MB: within quota
    end = await fill(ops, topic, 7)
    done = await quotas.apply_once()
    assert [(o["topic"], o["policy"]) for o in done.over_quota] == [
        (topic, "producer_exception")]
    assert done.over_quota[0]["backlog_bytes"] > 1 << 20
    refusal = await quotas.admit(topic, 0)
    assert refusal is not None and not refusal.held and "backlog quota" in refusal.message
    assert await quotas.admit("other", 0) is None
    await commit(ops, "slow", topic, end - 2)  # two batches (0.2 MB) left unconsumed
    await quotas.apply_once()
    assert await quotas.admit(topic, 0) is None


async def test_a_partition_no_group_committed_on_has_no_backlog(ops: OpsStack) -> None:
    quotas = quotas_for(ops)
    topic = await namespace_topic(ops, "nobody", {"backlog_quota_mb": 1,
                                                  "backlog_quota_policy": "producer_exception"})
    await fill(ops, topic, 12)
    assert (await quotas.apply_once()).over_quota == []
    assert not quotas.over_quota(topic, 0)


async def test_hold_waits_for_the_backlog_to_drop_then_times_out(ops: OpsStack) -> None:
    quotas = quotas_for(ops, hold_timeout_s=0.3)
    topic = await namespace_topic(ops, "held", {"backlog_quota_mb": 1})  # default: hold
    await commit(ops, "slow", topic, 0)
    end = await fill(ops, topic, 12)
    await quotas.apply_once()
    assert quotas.over_quota(topic, 0)
    started = trio.current_time()
    refusal = await quotas.admit(topic, 0)
    assert refusal is not None and refusal.held
    assert trio.current_time() - started >= 0.3
    quotas.hold_timeout_s = 10.0
    admitted: list[object] = []

    async def produce() -> None:
        admitted.append(await quotas.admit(topic, 0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.sleep(0.1)
        assert admitted == []  # still held
        await commit(ops, "slow", topic, end)
        await quotas.apply_once()
    assert admitted == [None]


async def test_eviction_moves_only_the_lagging_group_forward(ops: OpsStack) -> None:
    quotas = quotas_for(ops)
    topic = await namespace_topic(ops, "evict", {
        "backlog_quota_mb": 1, "backlog_quota_policy": "consumer_backlog_eviction"})
    await commit(ops, "slow", topic, 0)
    end = await fill(ops, topic, 16)
    await commit(ops, "fast", topic, end - 1)
    done = await quotas.apply_once()
    assert [(e["group"], e["from"]) for e in done.evicted] == [("slow", 0)]
    moved = ops.coordinator.offsets["slow"][(topic, 0)].offset
    assert 0 < moved < end and done.evicted[0]["to"] == moved
    # what is left for the slow group fits the quota (one batch is ~100 KB: at most 10 left)
    assert end - moved <= 10
    assert ops.coordinator.offsets["fast"][(topic, 0)].offset == end - 1
    assert await quotas.admit(topic, 0) is None  # eviction never refuses producers
    assert (await quotas.apply_once()).evicted == []  # within quota now


async def test_time_quota_refuses_and_evicts_by_age(ops: OpsStack) -> None:
    quotas = quotas_for(ops)
    topic = await namespace_topic(ops, "aged", {"backlog_quota_time_seconds": 60,
                                                "backlog_quota_policy": "producer_exception"})
    now = ops.clock_ms[0]
    await fill(ops, topic, 3, ts=now - 120_000, size=10)  # offsets 0..2: two minutes old
    await fill(ops, topic, 2, ts=now - 10_000, size=10)  # offsets 3..4: fresh
    await commit(ops, "g", topic, 1)
    done = await quotas.apply_once()
    assert done.over_quota[0]["oldest_age_ms"] == 120_000
    assert (await quotas.admit(topic, 0)) is not None
    await commit(ops, "g", topic, 3)
    await quotas.apply_once()
    assert await quotas.admit(topic, 0) is None
    # the same limit with eviction: the group skips what is too old, like TTL
    await ops.namespaces.set_policies("t/aged",
                                      {"backlog_quota_policy": "consumer_backlog_eviction"})
    await commit(ops, "h", topic, 0)
    done = await quotas.apply_once()
    assert done.evicted == [{"group": "h", "topic": topic, "partition": 0, "from": 0, "to": 3}]


async def test_removing_the_quota_releases_the_partition(ops: OpsStack) -> None:
    quotas = quotas_for(ops)
    topic = await namespace_topic(ops, "lifted", {"backlog_quota_mb": 1,
                                                  "backlog_quota_policy": "producer_exception"})
    await commit(ops, "slow", topic, 0)
    await fill(ops, topic, 12)
    ops.retention.backlog = quotas
    result = (await ops.retention.apply_once()).to_json()  # a retention pass runs it too
    assert result["backlog"]["over_quota"][0]["topic"] == topic
    assert quotas.over_quota(topic, 0)
    await ops.namespaces.set_policies("t/lifted", {"backlog_quota_mb": None})
    await quotas.apply_once()
    assert not quotas.over_quota(topic, 0)


class FixedRefusal:
    """A gate that refuses one queue the way BacklogQuotas.admit does."""

    def __init__(self, refusal: QuotaRefusal) -> None:
        self.refusal = refusal
        self.asked: list[tuple[str, int]] = []

    async def admit(self, topic: str, partition: int) -> QuotaRefusal | None:
        self.asked.append((topic, partition))
        return self.refusal if topic == "full" else None


@pytest.mark.parametrize(("held", "code"), [(False, ResponseCode.SERVICE_NOT_AVAILABLE),
                                            (True, ResponseCode.SYSTEM_BUSY)])
async def test_rocketmq_send_gets_the_refusal_code(held: bool, code: ResponseCode) -> None:
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bk, trio.open_nursery() as nursery:
            stack = await start_stack(store, bk, nursery)
            gate = FixedRefusal(QuotaRefusal("full-0: backlog quota exceeded", held))
            stack.topics.backlog_quotas = gate
            client = await RawClient.connect(stack.broker_addr)
            await stack.topics.create_topic("full", 1)
            r = await client.call(RC.SEND_MESSAGE_V2, send_ext("full", {}), b"x")
            assert (r.code, r.remark) == (code, "full-0: backlog quota exceeded")
            r = await client.call(RC.SEND_MESSAGE_V2, send_ext("roomy", {}), b"x")
            assert r.code == ResponseCode.SUCCESS
            assert gate.asked == [("full", 0), ("roomy", 0)]
            await client.aclose()
            nursery.cancel_scope.cancel()
            await stack.topics.close()
            await stack.broker.close()
    finally:
        await store.close()


@pytest.mark.parametrize(("held", "code"), [(False, 44), (True, 89)])
async def test_kafka_produce_gets_the_refusal_code(held: bool, code: int) -> None:
    async with running_stack() as stack, await stack.client() as client:
        gate = FixedRefusal(QuotaRefusal("full-0: backlog quota exceeded", held))
        stack.topics.backlog_quotas = gate
        await stack.topics.create_topic("full", 1)
        await stack.topics.create_topic("roomy", 1)
        answer = await wire_produce(client, "full", 0, rb.build_batch([(None, b"x")]))
        assert (answer["error_code"], answer["error_message"]) == (
            code, "full-0: backlog quota exceeded")
        answer = await wire_produce(client, "roomy", 0, rb.build_batch([(None, b"x")]))
        assert answer["error_code"] == 0
        assert gate.asked == [("full", 0), ("roomy", 0)]
        assert await (await stack.topics.partition("full", 0)).read(0, 1 << 20) == []


# --- a real standalone: confluent-kafka and the admin CLI ------------------------------------


@pytest.fixture(scope="module")
def server(module_standalone: Standalone) -> Standalone:
    return module_standalone


def produce_one(server: Standalone, topic: str, size: int) -> KafkaError | None:
    """Produce one message; its delivery error (None when it was stored)."""
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0, "acks": "all",
                  "message.max.bytes": 2_000_000, "retries": 0})
    p.produce(topic, value=b"v" * size, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(30) == 0
    return errors[0]


@pytest.mark.integration
@pytest.mark.slow
def test_standalone_refuses_produce_over_quota_until_a_group_commits_past(
        server: Standalone) -> None:
    from confluent_kafka import Consumer, TopicPartition

    server.admin("tenants", "create", "q")
    server.admin("namespaces", "create", "q/strict", "--policy", "backlog_quota_mb=1",
              "--policy", "backlog_quota_policy=producer_exception")
    topic = "q.strict.orders"
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "slow",
                         "enable.auto.commit": False})
    try:
        assert produce_one(server, topic, 10) is None  # auto-creates the topic
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        refused: KafkaError | None = None
        deadline = time.monotonic() + 40  # the background pass runs every 5 s
        sent = 1
        while refused is None and time.monotonic() < deadline:
            refused = produce_one(server, topic, 300_000)
            sent += 1
            if refused is None and sent > 5:
                time.sleep(0.5)
        assert refused is not None, "never refused"
        assert refused.code() == KafkaError.POLICY_VIOLATION
        assert not refused.retriable()
        assert sent >= 5  # 1 MB of backlog first (4 x 300 KB)
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.commit(offsets=[TopicPartition(topic, 0, end)], asynchronous=False)
        deadline = time.monotonic() + 60  # over quota: a pass every second
        while time.monotonic() < deadline:
            if produce_one(server, topic, 10) is None:
                break
            time.sleep(0.3)
        else:
            pytest.fail("produce still refused after the group committed past the backlog")
    finally:
        consumer.close()


@pytest.mark.integration
@pytest.mark.slow
def test_standalone_eviction_moves_the_lagging_group(server: Standalone) -> None:
    from confluent_kafka import Consumer, TopicPartition

    if "q" not in server.admin("tenants", "list"):  # type: ignore[operator]
        server.admin("tenants", "create", "q")
    server.admin("namespaces", "create", "q/evict", "--policy", "backlog_quota_mb=1",
              "--policy", "backlog_quota_policy=consumer_backlog_eviction")
    topic = "q.evict.orders"
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "lagging",
                         "enable.auto.commit": False})
    try:
        assert produce_one(server, topic, 10) is None
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        for _ in range(8):  # 2.4 MB: never refused under eviction
            assert produce_one(server, topic, 300_000) is None
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        deadline = time.monotonic() + 60  # a pass every 5 s (later when loaded)
        committed = 0
        while time.monotonic() < deadline:
            [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
            committed = tp.offset
            if committed > 0:
                break
            time.sleep(0.5)
        # moved forward, leaving at most ~1 MB (three 300 KB messages) unconsumed
        assert 0 < committed < end and end - committed <= 4, (committed, end)
    finally:
        consumer.close()


async def lagging_partition(ops: OpsStack, name: str, batches: int
                            ) -> tuple[BacklogQuotas, str, Any]:  # fmt: skip
    """Quotas, a topic and its partition 0's log: the topic under a 1 MB producer_exception
    quota, holding `batches` batches, none consumed by group "slow"."""
    quotas = quotas_for(ops)
    topic = await namespace_topic(ops, name, {"backlog_quota_mb": 1,
                                              "backlog_quota_policy": "producer_exception"})
    await commit(ops, "slow", topic, 0)
    await fill(ops, topic, batches)
    return quotas, topic, await ops.topics.partition(topic, 0)


async def test_a_ledger_trimmed_under_the_pass_is_skipped_not_fatal(ops: OpsStack) -> None:  # noqa: F811
    """DeleteRecords or retention landing while a pass reads ledger headers raises a ledger
    error (not a Kafka one): the pass skips that partition and the loop keeps running."""
    from ledger_backend.managed_ledger.types import InvalidPositionError

    quotas, _, plog = await lagging_partition(ops, "race", 12)

    async def trimmed(position: object) -> None:
        raise InvalidPositionError("ledger trimmed meanwhile")

    plog.read_header = trimmed  # type: ignore[method-assign]
    await quotas.apply_once()  # the partition is skipped, nothing escapes
    with trio.move_on_after(0.3) as waited:
        await quotas.run(interval_s=0.01, over_quota_interval_s=0.01)
    assert waited.cancelled_caught  # still looping, not dead


async def test_a_pass_keeps_its_log_open_against_idle_unloading(ops: OpsStack) -> None:
    """As retention passes do (idle_unloader.py): the log a pass works on is not unloaded
    as idle under it (a read of a log closed meanwhile failed the partition's check)."""
    quotas, topic, plog = await lagging_partition(ops, "pinned", 3)
    key = (topic, 0)
    reading, release = trio.Event(), trio.Event()
    real_read_header = plog.read_header

    async def slow_read_header(position: Any) -> Any:
        reading.set()
        await release.wait()
        return await real_read_header(position)

    plog.read_header = slow_read_header  # type: ignore[method-assign]
    ops.topics.use_tick += 5  # not handed out lately: idle
    async with trio.open_nursery() as nursery:
        nursery.start_soon(quotas.apply_once)
        await reading.wait()
        assert not await ops.topics.unload_partition(key, plog, ops.topics.use_tick - 1)
        release.set()
    assert await ops.topics.unload_partition(key, plog, ops.topics.use_tick - 1)



async def test_a_pass_looks_only_at_partitions_of_namespaces_with_a_quota(
        ops: OpsStack) -> None:
    """With 100,000 partitions open the pass took ~0.2 s of the event loop every 5 s even when
    no namespace had a quota; now it looks at no partition then, and at none of a namespace
    without one."""
    quotas = quotas_for(ops)
    await ops.topics.create_topic("plain", 1)
    plain = await ops.topics.partition("plain", 0)
    pinned: list[str] = []
    real_pinned = plain.pinned

    def spy() -> Any:
        pinned.append("plain")
        return real_pinned()

    plain.pinned = spy  # type: ignore[method-assign]
    await quotas.apply_once()
    assert pinned == []  # no quota anywhere
    limited = await namespace_topic(ops, "limited", {
        "backlog_quota_mb": 1, "backlog_quota_policy": "producer_exception"})
    await commit(ops, "slow", limited, 0)
    await fill(ops, limited, 12)
    await quotas.apply_once()
    assert quotas.over_quota(limited, 0) and pinned == []  # the default namespace has none
    await ops.namespaces.set_policies("t/limited", {"backlog_quota_mb": None})
    await quotas.apply_once()
    assert not quotas.over_quota(limited, 0)  # no quota left: released without a look
