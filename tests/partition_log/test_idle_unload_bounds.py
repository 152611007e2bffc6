"""What idle unloading (gateway/topics/idle_unloader.py) must never do.

- Close a log handed out in the current or the previous tick, however many partitions open
  meanwhile: a request holds it between its `partition()` call and its append or read.  Ticks
  are time: an open over max_open_partitions wakes a sweep but does not age the logs handed
  out just now.  (The clock is a MockClock that never moves by itself.)
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from protocols.kafka import record_batch as rb


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
