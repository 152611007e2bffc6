"""Held RocketMQ messages move between the one-process and the bundles' layout
(gateway/rocketmq/held_layout.py): every delayed message past its level's scan position and
every undecided half message gets exactly one copy where the other shape reads it (level queue
of its real partition's bundle, REAL_QID translated, store time kept), the old positions pass
them and the old half messages are decided ("m"); a move interrupted midway and run again
copies nothing twice; moving back restores the one-process placement.  Real topic service and
managed ledgers over the in-memory bookies (kill -9 on a durable bookie:
test_rocketmq_held_layout_crash.py)."""

from __future__ import annotations

import pytest

from gateway.rocketmq import held_layout
from gateway.rocketmq.held_layout import move_held
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.record_batch import Record
from tests.rocketmq.held_layout_crash_driver import (
    LEVELS,
    ONE_PROCESS,
    UNDECIDED,
    B,
    in_bundles,
    single_offsets,
    undecided,
    waiting,
    where,
    write_one_process,
)


@pytest.mark.parametrize(("interrupt_after", "chunk_bytes"),
                         [(None, 1 << 20), (1, 1 << 20), (3, 1 << 20), (None, 1), (5, 1)])
async def test_held_messages_move_to_bundles_and_back(monkeypatch: pytest.MonkeyPatch,
                                                      interrupt_after: int | None,
                                                      chunk_bytes: int) -> None:
    monkeypatch.setattr(held_layout, "CHUNK_BYTES", chunk_bytes)  # 1: a batch at a time
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk)
        topics = TopicService(store, factory, TopicServiceConfig())
        await topics.load()
        offsets = single_offsets(factory)
        await offsets.load()
        await write_one_process(topics, offsets)
        assert await waiting(topics, offsets, 1) == ONE_PROCESS

        if interrupt_after is not None:  # stopped after that many appends, then run again
            real_append = held_layout.HeldMove._append
            calls = 0

            async def stopping(self: held_layout.HeldMove, topic: str,
                               by: dict[int, list[Record]]) -> None:
                nonlocal calls
                for p in sorted(by):
                    calls += 1
                    if calls > interrupt_after:
                        raise KeyboardInterrupt
                    await real_append(self, topic, {p: by[p]})

            monkeypatch.setattr(held_layout.HeldMove, "_append", stopping)
            with pytest.raises(KeyboardInterrupt):
                await move_held(topics, offsets, LEVELS, 1, B)
            monkeypatch.setattr(held_layout.HeldMove, "_append", real_append)
        await move_held(topics, offsets, LEVELS, 1, B)
        assert await move_held(topics, offsets, LEVELS, 1, B) == 0  # done: nothing again

        assert await waiting(topics, offsets, B) == in_bundles()
        assert await undecided(topics, B) == {k: where(v) for k, v in UNDECIDED.items()}

        # back to one process: as it was, each once
        await move_held(topics, offsets, LEVELS, B, 1)
        assert await waiting(topics, offsets, 1) == ONE_PROCESS
        assert await undecided(topics, B) == {k: (0, v) for k, v in UNDECIDED.items()}
        await offsets.close()
        await topics.close()
