"""A Kafka produce with acks=all is acknowledged only after the journal's fdatasync of its
batch returned, on the durable backend as `ledgerwire standalone` runs it (one bookie's
storage engine with its journal, reached in-process), with confluent-kafka, plain and
idempotent.  5f490d2 split the append path (PartitionLog._store_batch, ManagedLedger._submit,
WriteHandle.append) into steps shared with the RocketMQ send answered from its completion; this
checks the Kafka side still answers from the journal group's release.  The journal's fdatasync
sleeps before syncing, so that an answer sent any earlier would arrive while it sleeps."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import ledger_backend.bookie.journal_files as journal_files
from gateway.kafka.broker import KafkaBroker, KafkaBrokerConfig
from gateway.kafka.listener import serve_kafka
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from tests.ledger_client.bookie_cluster import running_bookies
from tests.rocketmq.test_rocketmq_send_at_once_fsync import SlowSyncOs

pytestmark = pytest.mark.integration

CLIENT_TIMEOUT_S = 60.0


@asynccontextmanager
async def durable_kafka(bookie_dir: Path) -> AsyncIterator[str]:
    """A Kafka listener over a TopicService on one durable, fsyncing bookie: its bootstrap."""
    store = await open_store("memory:")
    try:
        async with open_bookie_storage(BookieStorageConfig(bookie_dir, fsync=True)) as storage, \
                running_bookies(store, 1, make_storage=lambda: storage), \
                BookKeeper(store, timeout_s=30, local_bookies=True) as bk:  # fmt: skip
            topics = TopicService(store, ManagedLedgerFactory(store, bk),
                                  TopicServiceConfig(auto_create_topics=True))
            await topics.load()
            try:
                broker = KafkaBroker(topics, KafkaBrokerConfig(
                    broker_id=1, advertised_host="127.0.0.1", advertised_port=0,
                    cluster_id="fsync-test"))
                async with trio.open_nursery() as nursery:
                    address = await nursery.start(serve_kafka, broker, "127.0.0.1", 0)
                    yield f"127.0.0.1:{address.port}"
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    await topics.close()
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


def produce_one_at_a_time(bootstrap: str, idempotent: bool, slow: SlowSyncOs | None,
                          count: int) -> list[str]:  # fmt: skip
    """Produce `count` records, each flushed before the next: what went wrong, if anything
    (with `slow`: also each record acknowledged before a journal fsync returned after it was
    produced)."""
    from confluent_kafka import Producer

    problems: list[str] = []
    reports: list[tuple[Any, int]] = []  # (error, syncs returned when the report came)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": idempotent})

    def report(err: Any, _msg: Any) -> None:
        reports.append((err, slow.synced if slow is not None else 0))

    for i in range(count):
        before = slow.synced if slow is not None else 0
        producer.produce("synced", f"v{i}".encode(), partition=0, on_delivery=report)
        if producer.flush(CLIENT_TIMEOUT_S) or len(reports) != i + 1:
            problems.append(f"record {i}: not delivered in time")
            break
        err, synced = reports[i]
        if err is not None:
            problems.append(f"record {i}: {err}")
        elif slow is not None and synced <= before:
            problems.append(f"record {i} acknowledged before its journal fsync")
    return problems


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
async def test_a_produce_is_acknowledged_only_after_its_journal_fsync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, idempotent: bool) -> None:
    async with durable_kafka(tmp_path / "bookie") as bootstrap:
        # the topic's log open and its producer known first: what follows is the steady path
        assert await trio.to_thread.run_sync(
            produce_one_at_a_time, bootstrap, idempotent, None, 1) == []
        slow = SlowSyncOs()
        monkeypatch.setattr(journal_files, "os", slow)
        with trio.fail_after(CLIENT_TIMEOUT_S * 2):
            problems = await trio.to_thread.run_sync(
                produce_one_at_a_time, bootstrap, idempotent, slow, 8)
        assert problems == []
        assert slow.synced >= 8
