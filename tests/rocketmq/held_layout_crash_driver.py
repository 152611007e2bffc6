"""Held RocketMQ messages as a one-process standalone leaves them, and what a shape reads of
them (gateway/rocketmq/held_layout.py); also a crash-test driver on a durable bookie and the
on-disk store:

    python -m tests.rocketmq.held_layout_crash_driver DATA_DIR PORT legacy|move|verify

`legacy` writes the one-process layout's held messages (delivered and waiting delayed ones,
decided and undecided half messages); `move` runs the start-up move into 16 bundles (the test
sets LEDGERWIRE_CRASH_AT / _AFTER to kill it at a step) and prints "DONE"; `verify` prints one
JSON line: what the bundles would deliver and check back, and the recorded layout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio

from gateway.cluster.bundle_placement import bundle_of
from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.rocketmq.delays import SCHEDULE_GROUP
from gateway.rocketmq.held_layout import HELD_LAYOUT_PATH, held_layout, move_held_messages
from gateway.rocketmq.service import ROCKETMQ_OFFSETS_LEDGER, RocketMQOffsets
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.managed_ledger import ManagedLedgerFactory
from protocols.kafka.built_batch import built_batch
from protocols.kafka.record_batch import Record
from protocols.rocketmq.delay_levels import DEFAULT_DELAY_LEVELS
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
from tests.managed_ledger.crash_support import durable_node, emit

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


async def write_one_process(topics: TopicService, offsets: RocketMQOffsets) -> None:
    """As one process holds them: level L in partition L - 1, REAL_QID = partition; "gone"
    was delivered, half message "committed" decided, "open" and "later" not."""
    await topics.create_topic(TOPIC, PARTS)
    for name, n in ((SCHEDULE_TOPIC, LEVELS + 1), (HALF_TOPIC, 1), (OP_HALF_TOPIC, 1)):
        await topics.create_topic(name, n)
    await append(topics, SCHEDULE_TOPIC, 3, [held(4, 1, "gone", 1000), held(4, 5, "d4", 2000)])
    await offsets.commit(SCHEDULE_GROUP, SCHEDULE_TOPIC, 3, 1)
    await append(topics, SCHEDULE_TOPIC, 0, [held(1, 0, "d1", 3000)])
    for p in range(PARTS):  # a batch each: a move reading a batch at a time reads 16
        await append(topics, SCHEDULE_TOPIC, 9, [held(10, p, f"d10-{p}", 4000 + p)])
    await append(topics, HALF_TOPIC, 0, [held(0, 7, "committed", 5000)])
    await append(topics, HALF_TOPIC, 0, [held(0, 2, "open", 6000)])
    await append(topics, HALF_TOPIC, 0, [held(0, 9, "later", 7000)])
    await append(topics, OP_HALF_TOPIC, 0, [Record(0, 0, b"d", b"0", [])])


UNDECIDED = {"open": 2, "later": 9}  # body -> REAL_QID
ONE_PROCESS = {"d4": (3, 5, 2000), "d1": (0, 0, 3000),
               **{f"d10-{p}": (9, p, 4000 + p) for p in range(PARTS)}}


def in_bundles() -> dict[str, tuple[int, int, int]]:
    """ONE_PROCESS as the bundles must hold them."""
    return {body: (p * B + where(real)[0], where(real)[1], stored)
            for body, (p, real, stored) in ONE_PROCESS.items()}


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


def single_offsets(factory: ManagedLedgerFactory) -> RocketMQOffsets:
    return RocketMQOffsets(LedgerOffsetStore(factory, None, ledger_name=ROCKETMQ_OFFSETS_LEDGER))


async def main(data_dir: Path, port: int, phase: str) -> None:
    async with durable_node(data_dir, port) as (store, bk):
        factory = ManagedLedgerFactory(store, bk)
        topics = TopicService(store, factory, TopicServiceConfig())
        await topics.load()
        out: Any = "DONE"
        if phase == "legacy":
            offsets = single_offsets(factory)
            await offsets.load()
            await write_one_process(topics, offsets)
            await offsets.close()
        elif phase == "move":  # as the supervisor does, before the offsets split
            source = await held_layout(store, B, B)
            await move_held_messages(store, factory, None, topics, DEFAULT_DELAY_LEVELS,
                                     source, B)
        else:
            offsets = single_offsets(factory)
            await offsets.load()
            layout, _ = await store.get(HELD_LAYOUT_PATH)
            out = json.dumps({"waiting": await waiting(topics, offsets, B),
                              "undecided": await undecided(topics, B),
                              "layout": int(layout)}, sort_keys=True)
            await offsets.close()
        await topics.close()
        await factory.close()
        emit(out)


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
