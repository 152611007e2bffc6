"""The idle unloader's sweep over the bound (gateway/topics/idle_unloader.py, issue 16), on a
stand-in for the topic service: it closes the least recently used logs that are not busy,
at most UNLOAD_CONCURRENCY at a time, and asks `busy` only of the logs it is choosing among
(a sweep runs every time the bound is passed, and asked every open log: 60% of the unloader's
time at 5,000 open logs)."""

from __future__ import annotations

from typing import Any

import trio

from gateway.topics.idle_unloader import UNLOAD_CONCURRENCY, IdleUnloader


class FakeLog:
    def __init__(self, used_tick: int, busy: bool, asked: list[int]) -> None:
        self.used_tick = used_tick
        self._busy = busy
        self._asked = asked

    @property
    def busy(self) -> bool:
        self._asked.append(self.used_tick)
        return self._busy


class FakeTopics:
    def __init__(self, logs: dict[tuple[str, int], FakeLog]) -> None:
        self.use_tick = 1000
        self.logs = logs
        self.closing = 0
        self.most_closing = 0

    def open_partitions_view(self) -> dict[tuple[str, int], Any]:
        return self.logs

    def is_internal(self, topic: str) -> bool:
        return topic.startswith("internal")

    async def unload_partition(self, key: tuple[str, int], plog: Any,
                               unused_before: int) -> bool:
        self.closing += 1
        self.most_closing = max(self.most_closing, self.closing)
        await trio.sleep(0.01)
        self.closing -= 1
        del self.logs[key]
        return True


async def test_a_sweep_closes_the_least_recently_used_and_asks_few_if_busy() -> None:
    asked: list[int] = []
    logs = {("t", tick): FakeLog(tick, busy=tick % 10 == 3, asked=asked)
            for tick in range(400)}
    logs[("internal-queue", 0)] = FakeLog(0, busy=False, asked=asked)
    topics = FakeTopics(logs)
    unloader = IdleUnloader(topics, idle_s=0, max_open=200)
    closed = await unloader.sweep(idle_scan=False)
    excess = 401 - 180  # down to 90% of the bound
    assert closed == excess
    gone = sorted(tick for tick in range(400) if ("t", tick) not in topics.logs)
    # the least recently used that were not busy (ticks ending in 3 were), never internal
    assert gone == [t for t in range(400) if t % 10 != 3][:excess]
    assert ("internal-queue", 0) in topics.logs
    assert len(asked) <= excess + excess // 9 + 1  # was: every open log (401)
    assert 1 < topics.most_closing <= UNLOAD_CONCURRENCY
