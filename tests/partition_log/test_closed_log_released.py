"""A closed partition log is freed by reference counting alone, not by the cycle collector
(issue 16).

Every log the idle unloader closed used to stay in memory as cyclic garbage, with its managed
ledger, write handle, caches and producer state (~70 objects): the managed ledger's tail cache
and log reader called back into it through a bound method and closures, and the partition's
timestamp search held the partition.  Only a full collection, which walks the whole heap, could
free them, and the promotions of those objects were what made full collections come: at 40,000
first writes under max_open_partitions 5,000, full collections took 40% of the node's CPU.
Here the collector is off while a log is opened, used and closed: the log and its ledger must
be gone as soon as nothing refers to them.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
import trio

from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka import record_batch as rb
from tests.ledger_client.bookie_cluster import running_bookies


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_a_closed_log_and_its_ledger_are_freed_without_the_cycle_collector(
        collector_off: None) -> None:  # noqa: ARG001
    store = await open_store("memory:")
    try:
        async with running_bookies(store, 1), \
                BookKeeper(store, timeout_s=60, local_bookies=True) as bk:  # fmt: skip
            topics = TopicService(store, ManagedLedgerFactory(store, bk), TopicServiceConfig())
            await topics.load()
            await topics.create_topic("released", 1)
            plog = await topics.partition("released", 0)
            for sequence, value in enumerate((b"a", b"b")):  # an idempotent producer's state
                await plog.append(rb.build_batch([(None, value)], producer_id=9,
                                                 producer_epoch=0, base_sequence=sequence))
            assert len(await plog.read(0, 1 << 20)) == 2  # the ledger's log reader
            assert await plog.offset_for_timestamp(0) is not None  # the timestamp search
            assert await plog.max_timestamp_offset() is not None
            log_freed, ledger_freed = trio.Event(), trio.Event()
            log_ref = weakref.ref(plog, lambda _: log_freed.set())
            ledger_ref = weakref.ref(plog.ledger, lambda _: ledger_freed.set())
            assert await topics.unload_partition(("released", 0), plog, topics.use_tick + 1)
            del plog
            with trio.move_on_after(30):  # background tasks of the close let go
                await log_freed.wait()
                await ledger_freed.wait()
            assert log_ref() is None, "the closed partition log is only freed by a collection"
            assert ledger_ref() is None, "the closed managed ledger is only freed by a collection"
            # and it opens again with its data
            again = await topics.partition("released", 0)
            assert again.high_watermark == 2
            await topics.close()
    finally:
        await store.close()
