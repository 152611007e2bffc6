"""A bundle's background services meet its release quietly.

Ownership marks a bundle as releasing (or drops a lost one) before its release hook cancels the
bundle's delay scheduler and transaction service, so a scan already under way reads through a
port that now answers BundleNotServedError.  That is the release, not a bug: no traceback in the
log (a CI run's graceful-stop check failed on one), and no WARNING either: the error says it is
a unit released here (ledger_backend.faults.is_released_here), which log_failure notes at DEBUG
wherever a service meets it (a scan, a delivery, a service's load).  The clock is virtual: the
scans counted within the window never depend on how busy the machine is.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from gateway.rocketmq.bundle_logs import BundleNotServedError
from gateway.rocketmq.bundle_services import BundleTransactions, run_bundle_services
from gateway.rocketmq.delays import DelayScheduler
from gateway.rocketmq.transactions import TransactionService
from protocols.rocketmq.topic_names import HALF_TOPIC, OP_HALF_TOPIC, SCHEDULE_TOPIC, to_storage

STORAGE_TOPICS = [to_storage(t) for t in (HALF_TOPIC, OP_HALF_TOPIC, SCHEDULE_TOPIC)]


class ReleasedTopics:
    """A bundle broker's topics once the bundle is releasing: known, but not served."""

    def __init__(self) -> None:
        self.asked = 0

    def topics(self) -> dict[str, Any]:
        return dict.fromkeys(STORAGE_TOPICS)  # the services' topics exist

    async def refresh_topic(self, name: str) -> Any:
        return SimpleNamespace(name=name, partitions=32)

    async def partition(self, topic: str, partition: int) -> Any:
        self.asked += 1
        raise BundleNotServedError("bundle 3 (DefaultCluster-b3) not served here")


def released_broker() -> Any:
    topics = ReleasedTopics()

    async def ensure_topic(name: str, queues: int) -> Any:
        return await topics.refresh_topic(name)

    return SimpleNamespace(topics=topics, offsets=SimpleNamespace(), ensure_topic=ensure_topic,
                           bundle=3)


def no_warning_nor_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def test_transaction_scan_of_a_releasing_bundle_logs_no_traceback(
        caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock) -> None:
    broker = released_broker()
    service = TransactionService(broker, scan_interval_s=0.01)
    with caplog.at_level(logging.DEBUG), trio.move_on_after(0.2):
        await service.run()
    assert broker.topics.asked >= 2  # it kept scanning until cancelled
    no_warning_nor_traceback(caplog)


async def test_delay_level_of_a_releasing_bundle_logs_no_traceback(
        caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock) -> None:
    broker = released_broker()
    scheduler = DelayScheduler(broker, "1s 2s")
    with caplog.at_level(logging.DEBUG), trio.move_on_after(0.2):
        await scheduler._run_level(1)
    assert broker.topics.asked >= 1
    no_warning_nor_traceback(caplog)


async def test_bundle_services_restarted_on_a_releasing_bundle_log_no_traceback(
        caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock) -> None:
    """The transaction service's load (before its scans) meets the release too: the bundle's
    service keeper restarts it quietly until the release cancels it."""
    broker = released_broker()
    broker.delays = DelayScheduler(broker, "1s 2s")
    broker.transactions = BundleTransactions(broker, SimpleNamespace(
        transaction_check_timeout_s=6.0, transaction_check_interval_s=60.0,
        transaction_max_checks=15))
    with caplog.at_level(logging.DEBUG), trio.move_on_after(5):
        await run_bundle_services(broker, lambda bundle: True)
    assert broker.topics.asked >= 4  # loads restarted, deliveries retried
    no_warning_nor_traceback(caplog)
