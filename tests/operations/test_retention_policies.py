"""Pulsar-style retention (consumed data goes) and TTL (lagging groups skip), in-process."""

from __future__ import annotations

import trio

from gateway.topics.retention_policies import consumed_ledger_cut
from protocols.kafka.group_model import CommittedOffset
from tests.operations.ops_stack import OpsStack, batch


def test_consumed_ledger_cut_only_whole_ledgers() -> None:
    bases = [(1, 0), (2, 4), (3, None), (4, 8)]
    assert consumed_ledger_cut(bases, 3, 12) is None  # inside the first ledger
    assert consumed_ledger_cut(bases, 4, 12) == 4
    assert consumed_ledger_cut(bases, 7, 12) == 4
    assert consumed_ledger_cut(bases, 8, 12) == 8
    assert consumed_ledger_cut(bases, 12, 12) == 12  # everything consumed
    assert consumed_ledger_cut([], 5, 5) is None


async def commit(ops: OpsStack, group: str, topic: str, offset: int) -> None:
    await ops.coordinator.commit_offsets(group_id=group, member_id="", generation_id=-1,
                                         offsets={(topic, 0): CommittedOffset(offset)})


async def fill(ops: OpsStack, topic: str, batches: int, ts: int = 1_000) -> None:
    plog = await ops.topics.partition(topic, 0)
    for _ in range(batches):
        await plog.append(batch(2, ts=ts))


async def test_no_retention_deletes_ledgers_every_group_consumed(ops: OpsStack) -> None:
    await ops.namespaces.create_tenant("t")
    await ops.namespaces.create_namespace("t/pulsar", {"retention_time_minutes": 0})
    topic = "t.pulsar.events"
    await ops.topics.create_topic(topic, 1)
    await fill(ops, topic, 6)  # 2 entries per ledger: ledgers start at offsets 0, 4, 8
    plog = await ops.topics.partition(topic, 0)
    ledgers_before = ops.topics.partition_ledgers(topic, 0)
    assert len([x for x in ledgers_before if x.entries]) == 3
    # nobody committed: nothing goes
    assert (await ops.retention.apply_once()).ledgers_deleted == {}
    await commit(ops, "fast", topic, 12)
    await commit(ops, "slow", topic, 5)
    done = await ops.retention.apply_once()
    assert done.ledgers_deleted == {f"{topic}-0": 1}  # only [0, 4) is consumed by both
    assert plog.log_start_offset == 4
    assert (await plog.read(4, 1 << 20))  # the slow group still reads what it has not consumed
    await commit(ops, "slow", topic, 12)
    await ops.retention.apply_once()
    assert plog.log_start_offset == 12
    # the ledger being written is never deleted (as in Pulsar); every closed one went
    assert len(ops.topics.partition_ledgers(topic, 0)) == 1


async def test_default_namespace_keeps_consumed_data(ops: OpsStack) -> None:
    await ops.topics.create_topic("kept", 1)
    await fill(ops, "kept", 6)
    await commit(ops, "g", "kept", 12)
    assert (await ops.retention.apply_once()).ledgers_deleted == {}
    assert (await ops.topics.partition("kept", 0)).log_start_offset == 0


async def test_ttl_moves_a_lagging_group_past_expired_messages(ops: OpsStack) -> None:
    await ops.namespaces.create_tenant("t")
    await ops.namespaces.create_namespace("t/ttl", {"message_ttl_seconds": 60})
    topic = "t.ttl.events"
    await ops.topics.create_topic(topic, 1)
    now = ops.clock_ms[0]
    await fill(ops, topic, 3, ts=now - 120_000)  # offsets 0..5 are two minutes old
    await fill(ops, topic, 2, ts=now - 10_000)  # offsets 6..9 are fresh
    await commit(ops, "lagging", topic, 2)
    await commit(ops, "current", topic, 8)
    done = await ops.retention.apply_once()
    assert done.offsets_expired == [
        {"group": "lagging", "topic": topic, "partition": 0, "from": 2, "to": 6}]
    assert ops.coordinator.offsets["lagging"][(topic, 0)].offset == 6
    assert ops.coordinator.offsets["current"][(topic, 0)].offset == 8  # never moved back
    ops.clock_ms[0] += 3_600_000  # everything expired: lagging groups go to the log end
    await ops.retention.apply_once()
    assert ops.coordinator.offsets["lagging"][(topic, 0)].offset == 10
    assert ops.coordinator.offsets["current"][(topic, 0)].offset == 10


async def test_time_retention_drops_older_ledgers_and_keeps_newer(ops: OpsStack) -> None:
    # a short topic retention.ms stands in for a namespace's minutes (both reach the same
    # managed-ledger bound; test_namespaces checks the namespace value gets there)
    await ops.topics.create_topic("timed", 1, {"retention.ms": "300"})
    await fill(ops, "timed", 4)  # two closed ledgers of two entries
    await trio.sleep(0.4)
    await fill(ops, "timed", 3)  # a newer ledger (and the one being written)
    plog = await ops.topics.partition("timed", 0)
    await ops.retention.apply_once()
    # a ledger ages from its last write (its successor's creation): [0, 4) was over 300 ms
    # old; [4, 8) was last written just now, when the sleep ended and [8, ...) began
    assert plog.log_start_offset == 4
    assert len(await plog.read(4, 1 << 20)) >= 1
