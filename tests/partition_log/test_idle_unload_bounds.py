"""What idle unloading (gateway/topics/idle_unloader.py) must never do.

- Close a log handed out in the current or the previous tick, however many partitions open
  meanwhile: a request holds it between its `partition()` call and its append or read.  Ticks
  are time: an open over max_open_partitions wakes a sweep but does not age the logs handed
  out just now.  (The clock is a MockClock that never moves by itself.)
- Let the replay after the last producer snapshot grow across unloads: a close without
  producers skips the state write while at most SHORT_REPLAY_BATCHES batches follow the last
  snapshot, counting those the open replayed, not only those appended since.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from gateway.topics.partition_log import SHORT_REPLAY_BATCHES
from protocols.kafka import record_batch as rb

STATE = "/ledgerwire/partition-state/plain/0"


async def test_opens_over_the_bound_do_not_close_a_log_just_handed_out(
        make_broker: Any, mock_clock: trio.testing.MockClock) -> None:
    broker = await make_broker(idle_unload_s=0, max_open_partitions=2)
    topics = broker.topics
    await topics.create_topic("held", 6)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(topics.run_unloader)
        await trio.testing.wait_all_tasks_blocked()
        held = await topics.partition("held", 0)  # a request about to append to it
        for p in range(1, 6):  # other requests open more partitions than the bound, now
            await topics.partition("held", p)
            await trio.testing.wait_all_tasks_blocked()
        assert not held.closed, "a log handed out this instant was unloaded"
        assert (await held.append(rb.build_batch([(None, b"v")]))).base_offset == 0
        # once time passes, the least recently used go (down to 90% of the bound)
        mock_clock.jump(3 * topics.unloader.tick_s)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(topics.unloader.tick_s)
        await trio.testing.wait_all_tasks_blocked()
        assert len(topics.open_partitions()) <= 2
        nursery.cancel_scope.cancel()


async def test_the_replay_after_the_last_snapshot_stays_short_across_unloads(
        make_broker: Any, store: Any) -> None:
    broker = await make_broker(idle_unload_s=0)
    topics = broker.topics
    await topics.create_topic("plain", 1)
    per_session = SHORT_REPLAY_BATCHES // 2 + 1  # two sessions' batches exceed the short replay
    versions = []
    for session in range(3):
        plog = await topics.partition("plain", 0)
        for i in range(per_session):
            await plog.append(rb.build_batch([(None, b"%d-%d" % (session, i))]))
        _, claimed = await store.get(STATE)
        topics.use_tick += 5
        assert await topics.unload_partition(("plain", 0), plog, topics.use_tick - 1)
        _, closed = await store.get(STATE)
        versions.append(closed.version - claimed.version)  # 1: a snapshot written on close
    # the first close skips it (a short replay); the second must not: the next open would
    # replay both sessions' batches, and so on without end
    assert versions[:2] == [0, 1], versions
    again = await topics.partition("plain", 0)
    assert again.high_watermark == 3 * per_session
