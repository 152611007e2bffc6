"""Held RocketMQ messages move between the one-process and the bundles' layout
(gateway/rocketmq/held_layout.py): every delayed message past its level's scan position and
every undecided half message gets exactly one copy where the other shape reads it (level queue
of its real partition's bundle, REAL_QID translated, store time kept), the old positions pass
them and the old half messages are decided ("m"); a move killed midway and run again copies
nothing twice; moving back restores the one-process placement.  Real topic service and
managed ledgers over the in-memory bookies."""

from __future__ import annotations

import pytest

from gateway.cluster.bundle_placement import bundle_of
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq import held_layout
from gateway.rocketmq.delays import SCHEDULE_GROUP
from gateway.rocketmq.held_layout import MOVED_PROPERTY, move_held
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER, RocketMQOffsets
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.built_batch import built_batch
from protocols.kafka.record_batch import Record
from protocols.rocketmq.handlers.common import records_of
from protocols.rocketmq.message_encoding import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    MessageMeta,
    from_record,
    to_record,
)
from protocols.rocketmq.topic_names import HALF_TOPIC, OP_HALF_TOPIC, SCHEDULE_TOPIC

B = 16
LEVELS = 18
TOPIC = "orders"
PARTS = 16


def where(partition: int) -> tuple[int, int]:
    """(bundle, queue id there) of TOPIC's partition."""
    bundle = bundle_of(TOPIC, partition, B)
    return bundle, [p for p in range(PARTS) if bundle_of(TOPIC, p, B) == bundle].index(partition)


def held(level: int, real: int, body: str, store_ms: int) -> Record:
    props = {PROPERTY_REAL_TOPIC: TOPIC, PROPERTY_REAL_QUEUE_ID: str(real),
             PROPERTY_DELAY: str(level)}
    return to_record(body.encode(), props, MessageMeta(store_timestamp=store_ms), store_ms)


async def append(topics: TopicService, topic: str, partition: int, records: list[Record]) -> None:
    plog = await topics.partition(topic, partition)
    await plog.append_built(built_batch(records))


async def read(topics: TopicService, topic: str, partition: int,
               start: int | None = None) -> list[Record]:
    plog = await topics.partition(topic, partition)
    offset = plog.log_start_offset if start is None else start
    out: list[Record] = []
    while offset < plog.high_watermark:
        got = records_of(await plog.read(offset, 1 << 20), offset)
        out += got
        offset = got[-1].offset + 1
    return out


async def waiting(topics: TopicService, offsets: RocketMQOffsets,
                  bundles: int) -> dict[str, tuple[int, int, int]]:
    """body -> (schedule partition, REAL_QID, store time) of every delayed message a shape
    with `bundles` would still deliver."""
    found: dict[str, tuple[int, int, int]] = {}
    partitions = topics.topics()[SCHEDULE_TOPIC].partitions
    for p in range(partitions if bundles > 1 else LEVELS + 1):
        for r in await read(topics, SCHEDULE_TOPIC, p, offsets.query(SCHEDULE_GROUP,
                                                                     SCHEDULE_TOPIC, p)):
            body, props, meta = from_record(r)
            assert body.decode() not in found, f"{body!r} held twice"
            found[body.decode()] = (p, int(props[PROPERTY_REAL_QUEUE_ID]), meta.store_timestamp)
    return found


async def undecided(topics: TopicService, bundles: int) -> dict[str, tuple[int, int]]:
    """body -> (half partition, REAL_QID) of every half message without a decision."""
    found: dict[str, tuple[int, int]] = {}
    for p in range(bundles):
        decided = {int(r.value or b"-1") for r in await read(topics, OP_HALF_TOPIC, p)}
        for r in await read(topics, HALF_TOPIC, p):
            if r.offset not in decided:
                body, props, _ = from_record(r)
                assert body.decode() not in found, f"{body!r} undecided twice"
                found[body.decode()] = (p, int(props[PROPERTY_REAL_QUEUE_ID]))
    return found


@pytest.mark.parametrize("crash_after", [None, 1, 3])
async def test_held_messages_move_to_bundles_and_back(monkeypatch: pytest.MonkeyPatch,
                                                      crash_after: int | None) -> None:
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk)
        topics = TopicService(store, factory, TopicServiceConfig())
        await topics.load()
        await topics.create_topic(TOPIC, PARTS)
        for name, n in ((SCHEDULE_TOPIC, LEVELS + 1), (HALF_TOPIC, 1), (OP_HALF_TOPIC, 1)):
            await topics.create_topic(name, n)
        offsets = RocketMQOffsets(LedgerOffsetStore(factory, None,
                                                    ledger_name=ROCKETMQ_OFFSETS_LEDGER))
        await offsets.load()
        # as one process holds them: level L in partition L - 1, REAL_QID = partition
        await append(topics, SCHEDULE_TOPIC, 3, [held(4, 1, "gone", 1000),
                                                 held(4, 5, "d4", 2000)])
        await offsets.commit(SCHEDULE_GROUP, SCHEDULE_TOPIC, 3, 1)  # "gone" was delivered
        await append(topics, SCHEDULE_TOPIC, 0, [held(1, 0, "d1", 3000)])
        await append(topics, SCHEDULE_TOPIC, 9, [held(10, p, f"d10-{p}", 4000 + p)
                                                 for p in range(PARTS)])
        await append(topics, HALF_TOPIC, 0, [held(0, 7, "committed", 5000),
                                             held(0, 2, "open", 6000)])
        await append(topics, OP_HALF_TOPIC, 0, [Record(0, 0, b"d", b"0", [])])
        before = await waiting(topics, offsets, 1)
        assert set(before) == {"d4", "d1", *(f"d10-{p}" for p in range(PARTS))}

        if crash_after is not None:  # killed after `crash_after` appends, then run again
            real_append = held_layout.HeldMove._append
            calls = 0

            async def dying(self: held_layout.HeldMove, topic: str, by: dict[int, list[Record]]
                            ) -> None:
                nonlocal calls
                for p in sorted(by):
                    calls += 1
                    if calls > crash_after:
                        raise KeyboardInterrupt
                    await real_append(self, topic, {p: by[p]})

            monkeypatch.setattr(held_layout.HeldMove, "_append", dying)
            with pytest.raises(KeyboardInterrupt):
                await move_held(topics, offsets, LEVELS, 1, B)
            monkeypatch.setattr(held_layout.HeldMove, "_append", real_append)
        await move_held(topics, offsets, LEVELS, 1, B)
        assert await move_held(topics, offsets, LEVELS, 1, B) == 0  # done: nothing again

        moved = await waiting(topics, offsets, B)
        assert set(moved) == set(before)
        for body, (p, qid, stored) in moved.items():
            old_p, real, old_stored = before[body]
            bundle, queue = where(real)
            assert (p, qid, stored) == (old_p * B + bundle, queue, old_stored), body
        half_moved = await undecided(topics, B)
        assert half_moved == {"open": (where(2)[0], where(2)[1])}

        # back to one process: as it was, each once
        await move_held(topics, offsets, LEVELS, B, 1)
        assert await waiting(topics, offsets, 1) == {
            body: (p, real, stored) for body, (p, real, stored) in before.items()}
        assert await undecided(topics, B) == {"open": (0, 2)}
        for r in await read(topics, HALF_TOPIC, 0):
            _, props, _ = from_record(r)
            assert props.get(MOVED_PROPERTY, "1/").startswith(("1/", f"{B}/")), props
        await offsets.close()
        await topics.close()
