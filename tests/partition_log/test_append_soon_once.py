"""PartitionLog.append_built_soon calls its `on_done` once: when the ledger's append fails at
once (ManagedLedger.append_soon then calls the completion before it returns) and that `on_done`
raises, the exception reaches append_built_soon's own "failed at once" handler, which must not
answer a second time (a RocketMQ send would be answered twice and its connection's slot and
count of started requests given back twice)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from ledger_backend.client.errors import BookieUnavailableError
from protocols.kafka.built_batch import built_batch
from protocols.kafka.errors import NotEnoughReplicasAfterAppendError
from protocols.kafka.record_batch import Record


async def test_a_callback_raising_on_an_append_failed_at_once_is_called_once(
        make_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    broker = await make_broker()
    await broker.topics.create_topic("t", 1)
    plog = await broker.topics.partition("t", 0)
    ledger: Any = plog.ledger

    def fails_at_once(data: bytes, on_done: Any) -> None:  # as ManagedLedger.append_soon
        on_done(BookieUnavailableError("bookie gone"))  # does when its handle refuses at once

    ledger.takes_append_soon = lambda: True
    ledger.append_soon = fails_at_once
    calls: list[object] = []

    def answer(result: object) -> None:
        calls.append(result)
        raise RuntimeError("the caller's callback has a bug")

    batch = built_batch([Record(0, int(time.time() * 1000), None, b"v", [])])
    with caplog.at_level(logging.ERROR, logger="gateway.topics.partition_log"):
        assert plog.append_built_soon(batch, answer) is True  # started (and failed)
    assert len(calls) == 1, calls
    assert isinstance(calls[0], NotEnoughReplicasAfterAppendError)  # retried by clients
    bugs = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(bugs) == 1 and bugs[0].exc_info is not None  # the caller's bug, with traceback
