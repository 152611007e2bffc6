"""Idle partition logs are closed and reopened on demand; open logs stay within the bound
(gateway/topics/idle_unloader.py).  Virtual clock: the unloader's ticks are trio sleeps."""

from __future__ import annotations

import json
from typing import Any

import trio

from ledger_backend.managed_ledger.factory import DEFAULT_ROOT
from ledger_backend.managed_ledger.metadata_format import managed_ledger_path
from protocols.kafka import record_batch as rb


def values(batches: list[bytes]) -> list[bytes | None]:
    return [r.value for b in batches for r in rb.decode_records(b)]


async def test_an_idle_log_is_closed_and_reopened_with_its_data(
        make_broker: Any, store: Any, autojump_clock: Any) -> None:  # noqa: ARG001
    broker = await make_broker(idle_unload_s=4.0)
    topics = broker.topics
    await topics.create_topic("idle", 3)
    plog = await topics.partition("idle", 0)
    pid_batch = rb.build_batch([(None, b"a"), (None, b"b")], producer_id=7, producer_epoch=0,
                               base_sequence=0)
    await plog.append(pid_batch)
    waited = await topics.partition("idle", 1)  # a reader waits on it: busy
    used = await topics.partition("idle", 2)  # handed out every second: in use
    async with trio.open_nursery() as nursery:
        nursery.start_soon(topics.run_unloader)
        nursery.start_soon(waited.wait_for_data, 0, 1000.0)
        for _ in range(20):
            await trio.sleep(1)
            assert await topics.partition("idle", 2) is used
        assert plog.closed and ("idle", 0) not in topics.open_partitions()
        assert not waited.closed and not used.closed
        # closed cleanly: every ledger of the partition is closed, so a reopen recovers nothing
        data, _ = await store.get(managed_ledger_path(DEFAULT_ROOT, "public/default/idle-0"))
        assert all(ledger["closed"] for ledger in json.loads(data)["ledgers"])
        again = await topics.partition("idle", 0)
        assert again is not plog and again.high_watermark == 2
        assert values(await again.read(0, 1 << 20)) == [b"a", b"b"]
        # the producer's state survived: its next batch is in sequence, a resend a duplicate
        nxt = rb.build_batch([(None, b"c")], producer_id=7, producer_epoch=0, base_sequence=2)
        assert (await again.append(nxt)).base_offset == 2
        assert (await again.append(pid_batch)).base_offset == 0
        assert topics.unloader.unloaded == 1
        nursery.cancel_scope.cancel()


async def test_open_logs_stay_within_the_bound_least_recently_used_first(
        make_broker: Any, autojump_clock: Any) -> None:  # noqa: ARG001
    broker = await make_broker(idle_unload_s=0, max_open_partitions=10)
    topics = broker.topics
    await topics.create_topic("many", 30)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(topics.run_unloader)
        for p in range(30):
            await (await topics.partition("many", p)).append(
                rb.build_batch([(None, f"v{p}".encode())]))
            if p % 5 == 4:
                await trio.sleep(1)  # a tick: the earlier ones become least recently used
        await trio.sleep(3)
        assert len(topics.open_partitions()) <= 10
        assert ("many", 29) in topics.open_partitions()  # the most recent stay
        assert ("many", 0) not in topics.open_partitions()
        for p in range(30):  # every one reads back, reopened on demand
            assert values(await (await topics.partition("many", p)).read(0, 1 << 20)) == [
                f"v{p}".encode()]
            if p % 5 == 4:
                await trio.sleep(1)
        await trio.sleep(3)
        assert len(topics.open_partitions()) <= 10
        assert topics.unloader.unloaded >= 40
        nursery.cancel_scope.cancel()


async def test_a_request_during_the_close_waits_and_gets_a_fresh_log(
        make_broker: Any, autojump_clock: Any) -> None:  # noqa: ARG001
    broker = await make_broker(idle_unload_s=0)
    topics = broker.topics
    await topics.create_topic("race", 1)
    plog = await topics.partition("race", 0)
    await plog.append(rb.build_batch([(None, b"x")]))
    topics.use_tick += 5
    closing = trio.Event()
    release = trio.Event()
    real_close = plog.ledger.close

    async def slow_close() -> None:
        closing.set()
        await release.wait()
        await real_close()

    plog.ledger.close = slow_close
    got: list[Any] = []

    async def request() -> None:
        got.append(await topics.partition("race", 0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(topics.unload_partition, ("race", 0), plog, topics.use_tick - 1)
        await closing.wait()
        nursery.start_soon(request)
        await trio.sleep(1)
        assert not got  # waits for the close instead of getting the closing log
        release.set()
    assert got[0] is not plog and not got[0].closed
    assert values(await got[0].read(0, 1 << 20)) == [b"x"]
    # a log handed out since the tick asked for is not closed
    assert not await topics.unload_partition(("race", 0), got[0], topics.use_tick)


async def test_a_close_without_producers_writes_no_state_and_reopens_by_replay(
        make_broker: Any, store: Any) -> None:
    broker = await make_broker(idle_unload_s=0)
    topics = broker.topics
    await topics.create_topic("plain", 1)
    plog = await topics.partition("plain", 0)
    for i in range(3):
        await plog.append(rb.build_batch([(None, f"p{i}".encode())]))
    _, before = await store.get("/ledgerwire/partition-state/plain/0")
    topics.use_tick += 5
    assert await topics.unload_partition(("plain", 0), plog, topics.use_tick - 1)
    _, after = await store.get("/ledgerwire/partition-state/plain/0")
    assert after.version == before.version  # no producer snapshot written on the close
    again = await topics.partition("plain", 0)
    assert again.high_watermark == 3
    assert values(await again.read(0, 1 << 20)) == [b"p0", b"p1", b"p2"]
    # an idempotent producer's batch is remembered the same way (a snapshot on close)
    await again.append(rb.build_batch([(None, b"i")], producer_id=9, producer_epoch=0,
                                      base_sequence=0))
    topics.use_tick += 5
    assert await topics.unload_partition(("plain", 0), again, topics.use_tick - 1)
    _, last = await store.get("/ledgerwire/partition-state/plain/0")
    assert last.version > after.version + 1  # claimed by the reopen, then the snapshot
    third = await topics.partition("plain", 0)
    assert (await third.append(rb.build_batch([(None, b"i")], producer_id=9, producer_epoch=0,
                                              base_sequence=0))).base_offset == 3


async def test_deleted_and_unloaded_partitions_leave_no_per_name_state(make_broker: Any) -> None:
    """A client test suite's churn of topics (issue 16: RSS grew with every topic created and
    deleted) and idle unloads keep no lock or marker per partition they touched."""
    broker = await make_broker(idle_unload_s=0)
    topics, factory = broker.topics, broker.factory
    for i in range(20):
        await topics.create_topic(f"churn-{i}", 2)
        for p in range(2):
            await (await topics.partition(f"churn-{i}", p)).append(rb.build_batch([(None, b"x")]))
        await topics.delete_topic(f"churn-{i}")
    await topics.create_topic("kept", 1)
    plog = await topics.partition("kept", 0)
    topics.use_tick += 5
    assert await topics.unload_partition(("kept", 0), plog, topics.use_tick - 1)
    assert not topics.open_partitions()
    assert not factory._name_locks and not factory._open
    assert not topics._open_locks and not topics.topic_store._state_dir_locks
    assert topics.topic_store._state_dirs <= {"kept"}


async def test_a_retention_pass_keeps_its_log_open_and_skips_closed_ones(
        make_broker: Any) -> None:
    broker = await make_broker(idle_unload_s=0)
    topics = broker.topics
    await topics.create_topic("kept", 2)
    plog = await topics.partition("kept", 0)
    other = await topics.partition("kept", 1)
    await other.close()  # closed (unloaded) after a pass listed it: skipped, no warning
    trimming, release = trio.Event(), trio.Event()
    real_trim = plog.ledger.trim

    async def slow_trim() -> list[int]:
        trimming.set()
        await release.wait()
        return await real_trim()

    plog.ledger.trim = slow_trim
    topics.use_tick += 5
    async with trio.open_nursery() as nursery:
        nursery.start_soon(topics.apply_retention)
        await trimming.wait()
        assert not await topics.unload_partition(("kept", 0), plog, topics.use_tick - 1)
        release.set()
    assert await topics.unload_partition(("kept", 0), plog, topics.use_tick - 1)
