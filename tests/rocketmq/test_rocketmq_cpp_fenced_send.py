"""The RocketMQ C++ client (rocketmq-client-python) sending through the path answered from the
append's completion, on the durable backend with fsync, while another client fences a queue's
ledger (as a new owner's recovery does): the send that meets the fence is answered with a code
the client retries (SERVICE_NOT_AVAILABLE), never SUCCESS for an entry the ledger refused;
every send the client saw succeed is stored, and no log line carries a traceback."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import trio

from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.metadata.store import MetadataStore
from protocols.kafka.record_batch import decode_records
from tests.rocketmq.conftest import durable_stack
from tests.rocketmq.cpp_client import message, producer, send_sync_patiently

pytestmark = pytest.mark.integration

TOPIC = "cppfenced"
BEFORE, AFTER = 20, 20


async def test_a_cpp_producer_rides_over_a_fenced_ledger(
        store: MetadataStore, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with durable_stack(store, tmp_path / "bookie", fsync=True, timeout_s=10) as stack:
        await stack.topics.create_topic(TOPIC, 1)
        halfway, fenced = threading.Event(), threading.Event()
        sent_ok: list[bytes] = []
        problems: list[str] = []

        def send_all() -> None:
            p = producer(stack.name_server_addr, "fenced-pg")
            try:
                for i in range(BEFORE + AFTER):
                    if i == BEFORE:
                        halfway.set()
                        fenced.wait(60)
                    body = f"m{i}".encode()
                    try:
                        status = send_sync_patiently(p, message(TOPIC, body, tags="t"))
                    except Exception as exc:  # noqa: BLE001 - the client raises one type
                        problems.append(f"{body!r}: {exc}")
                        continue
                    if status.name == "OK":
                        sent_ok.append(body)
                    else:
                        problems.append(f"{body!r}: {status}")
            finally:
                p.shutdown()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, send_all)
            await trio.to_thread.run_sync(halfway.wait, 120)
            plog = await stack.topics.partition(TOPIC, 0)
            ledger_id = plog.ledger.current_ledger_id
            async with BookKeeper(stack.store, timeout_s=10, local_bookies=True) as other:
                await other.open_ledger(ledger_id, recovery=True)  # fences it
            fenced.set()
        assert problems == []
        assert len(sent_ok) == BEFORE + AFTER
        plog = await stack.topics.partition(TOPIC, 0)  # reopened after the fence
        stored = [r.value for batch in await plog.read(0, 1 << 22)
                  for r in decode_records(batch)]
        assert set(sent_ok) <= set(stored)
        fence_answers = [r for r in caplog.records if "owned elsewhere" in r.getMessage()]
        assert fence_answers, "no send met the fence"
        loud = [(r.name, r.getMessage()) for r in caplog.records
                if r.exc_info is not None or r.levelno >= logging.ERROR]
        assert loud == []
