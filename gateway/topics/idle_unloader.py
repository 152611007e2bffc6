"""Idle partition logs are closed, and the number of open ones is bounded (issue 16).

As Pulsar unloads bundles, a broker here closes the partition logs nobody used lately: a log
not handed out by `TopicService.partition` for `idle_s` is closed cleanly (its producer
snapshot written, its ledger CLOSED and recorded, so the next open needs no recovery; an
empty ledger is dropped).  Its data and metadata stay.  The next request for it opens it again
through the same path as any open (the state node claimed by compare-and-set, the ledger list
read, a new ledger created), so ownership and fencing work as on a first open.  With
`max_open` > 0 the least recently used logs are closed too whenever more than `max_open` are
open (down to 90% of it, so one pass serves many opens).

Use is counted in ticks, not read from a clock on every request: the unloader advances
`TopicService.use_tick` every `tick_s` (1 s), and `partition()` stamps the log it hands out with
the current tick (one attribute store). A log stamped in the current or the previous tick (so
handed out less than `tick_s` ago) is never closed (a request holding it is between its
`partition()` call and its use), nor one that is `busy` (appends not yet durable, reads from the
ledger, waiting readers or producers, a state write, a pinned compaction or offload pass), nor
an internal topic's (RocketMQ's schedule, transaction and retry queues, which background loops
hold).

What an unloaded partition does not get until it is opened again: retention and compaction
passes, offloading and backlog-quota checks (they run over the open logs only).

This module must never close a log that is busy or was handed out in the last tick, and never
close one behind the topic service's back (TopicService.unload_partition takes the partition's
open lock, so a request arriving meanwhile waits and then opens it afresh).
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import Any, Protocol

import trio

log = logging.getLogger(__name__)

UNLOAD_CONCURRENCY = 64  # closes at a time: each is a few metadata writes, fsync-grouped
LIMIT_SLACK = 0.9  # over the bound, close down to this share of it


class UnloadableTopics(Protocol):
    use_tick: int

    def open_partitions_view(self) -> dict[tuple[str, int], Any]: ...
    def is_internal(self, topic: str) -> bool: ...
    async def unload_partition(self, key: tuple[str, int], plog: Any,
                               unused_before: int) -> bool: ...


class IdleUnloader:
    """Run `run()` in the broker's background nursery; `note_opened()` after each open."""

    def __init__(self, topics: UnloadableTopics, idle_s: float, max_open: int,
                 tick_s: float = 1.0) -> None:
        self.topics = topics
        self.idle_s = idle_s if idle_s > 0 else 0.0
        self.max_open = max(0, max_open)
        self.tick_s = min(tick_s, self.idle_s / 4) if self.idle_s else tick_s
        self.idle_ticks = max(2, math.ceil(self.idle_s / self.tick_s)) if self.idle_s else 0
        # the idle scan walks every open log: a few times per idle period, not every tick
        self.scan_every = max(1, self.idle_ticks // 4)
        self._wake = trio.Event()
        self.unloaded = 0  # logs closed so far (idle or over the bound)

    @property
    def enabled(self) -> bool:
        return bool(self.idle_s or self.max_open)

    def over_limit(self, open_count: int) -> bool:
        return bool(self.max_open) and open_count > self.max_open

    def note_opened(self, open_count: int) -> None:
        if self.over_limit(open_count):
            self._wake.set()

    async def run(self) -> None:
        if not self.enabled:
            return
        ticks = 0
        last_tick = trio.current_time()
        while True:
            with trio.move_on_at(last_tick + self.tick_s):
                await self._wake.wait()
            self._wake = trio.Event()
            idle_scan = False
            now = trio.current_time()
            if now >= last_tick + self.tick_s:  # woken early (over the bound): same tick
                self.topics.use_tick += 1
                ticks, last_tick = ticks + 1, now
                idle_scan = bool(self.idle_ticks) and ticks % self.scan_every == 0
            if idle_scan or self.over_limit(len(self.topics.open_partitions_view())):
                await self.sweep(idle_scan=idle_scan)
                # a sweep walks every open log: not after every open while over the bound
                await trio.sleep(self.tick_s / 10)

    async def sweep(self, *, idle_scan: bool = True) -> int:
        """Close the idle logs (if `idle_scan`) and, over the bound, the least recently used;
        returns how many were closed."""
        tick = self.topics.use_tick
        logs = self.topics.open_partitions_view()
        unused_before = tick - 1  # stamped in the current or previous tick: in use
        is_internal = self.topics.is_internal
        # (`busy` costs more than the rest: asked only of the logs chosen below, not of all)
        candidates = [(plog.used_tick, key, plog) for key, plog in logs.items()
                      if plog.used_tick < unused_before and not is_internal(key[0])]
        chosen: list[tuple[int, tuple[str, int], Any]] = []
        if idle_scan and self.idle_ticks:
            chosen = [c for c in candidates if tick - c[0] >= self.idle_ticks and not c[2].busy]
        if self.over_limit(len(logs)):
            excess = len(logs) - int(self.max_open * LIMIT_SLACK)
            if excess > len(chosen):
                candidates.sort(key=lambda c: c[0])  # least recently used first
                chosen = list(itertools.islice((c for c in candidates if not c[2].busy),
                                               excess))
        if not chosen:
            return 0
        closed = [0]
        queue = iter(chosen)

        async def unload() -> None:  # UNLOAD_CONCURRENCY of these share the queue
            for _, key, plog in queue:
                if await self.topics.unload_partition(key, plog, unused_before):
                    closed[0] += 1

        async with trio.open_nursery() as nursery:
            for _ in range(min(UNLOAD_CONCURRENCY, len(chosen))):
                nursery.start_soon(unload)
        self.unloaded += closed[0]
        log.info("unloaded %d idle partition logs (%d open)", closed[0],
                 len(self.topics.open_partitions_view()))
        return closed[0]
