"""A bundle's background services meet its release quietly.

Ownership marks a bundle as releasing before its release hook cancels the bundle's delay
scheduler and transaction service, so a scan already under way reads through a port that now
answers BundleNotServedError.  That is the release, not a bug: no traceback in the log (a CI
run's graceful-stop check failed on one).  The clock is virtual: the scans counted within the
window never depend on how busy the machine is.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from gateway.rocketmq.bundle_logs import BundleNotServedError
from gateway.rocketmq.delays import DelayScheduler
from gateway.rocketmq.transactions import TransactionService


class ReleasedTopics:
    """A bundle broker's topics once the bundle is releasing: known, but not served."""

    def __init__(self) -> None:
        self.asked = 0

    def topics(self) -> dict[str, Any]:
        return {}

    async def refresh_topic(self, name: str) -> Any:
        return SimpleNamespace(name=name, partitions=32)

    async def partition(self, topic: str, partition: int) -> Any:
        self.asked += 1
        raise BundleNotServedError("bundle 3 (DefaultCluster-b3) not served here")


def released_broker() -> Any:
    return SimpleNamespace(topics=ReleasedTopics(), offsets=SimpleNamespace())


async def test_transaction_scan_of_a_releasing_bundle_logs_no_traceback(
        caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock) -> None:
    broker = released_broker()
    service = TransactionService(broker, scan_interval_s=0.01)
    with caplog.at_level(logging.DEBUG), trio.move_on_after(0.2):
        await service.run()
    assert broker.topics.asked >= 2  # it kept scanning until cancelled
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_delay_level_of_a_releasing_bundle_logs_no_traceback(
        caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock) -> None:
    broker = released_broker()
    scheduler = DelayScheduler(broker, "1s 2s")
    with caplog.at_level(logging.DEBUG), trio.move_on_after(0.2):
        await scheduler._run_level(1)
    assert broker.topics.asked >= 1
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
