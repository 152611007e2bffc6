"""The ownership wrappers of a partition log (Kafka's OwnedPartitionLog, a RocketMQ bundle's
BundleOwnedLog) acknowledge an append only while the partition is still owned here, whichever
append method is called.  Both hand every other attribute to the log through `__getattr__`, so
an append method the log gains and the wrapper lacks goes through unchecked: append_built was
(7065a8d), and append_built_soon (5f490d2) was until these tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gateway.rocketmq.bundle_logs import BundleNotServedError, BundleOwnedLog
from gateway.topics.partition_log import PartitionLog
from protocols.kafka.errors import NotLeaderOrFollowerError
from protocols.kafka.handlers.topic_lookup import OwnedPartitionLog

WRAPPERS = [OwnedPartitionLog, BundleOwnedLog]


@pytest.mark.parametrize("wrapper", WRAPPERS, ids=lambda w: w.__name__)
def test_every_append_method_of_the_log_is_the_wrappers_own(wrapper: type) -> None:
    appends = sorted(name for name in dir(PartitionLog)
                     if name.startswith("append") and callable(getattr(PartitionLog, name)))
    assert {"append", "append_built", "append_built_soon"} <= set(appends)
    unchecked = [name for name in appends if name not in vars(wrapper)]
    assert unchecked == [], f"{wrapper.__name__} hands {unchecked} to the log unchecked"


class SoonLog:
    """A log whose append_built_soon completes when the test says (as the ledger's would)."""

    def __init__(self) -> None:
        self.pending: list[Callable[[Any], None]] = []

    def append_built_soon(self, batch: object, on_done: Callable[[Any], None]) -> bool:
        self.pending.append(on_done)
        return True


class NoOwner:
    def owner_of(self, topic: str, partition: int) -> None:
        return None


def _wrap(wrapper: type, inner: object, owned: list[bool]) -> Any:
    if wrapper is OwnedPartitionLog:
        return OwnedPartitionLog(inner, NoOwner(), "t", 0,  # type: ignore[arg-type]
                                 local=lambda topic, partition: owned[0])
    return BundleOwnedLog(inner, lambda: owned[0], "bundle 1")


@pytest.mark.parametrize("wrapper", WRAPPERS, ids=lambda w: w.__name__)
def test_an_append_soon_that_outlives_ownership_is_not_acknowledged(wrapper: type) -> None:
    inner = SoonLog()
    owned = [True]
    plog = _wrap(wrapper, inner, owned)
    answers: list[Any] = []
    assert plog.append_built_soon(object(), answers.append)
    assert plog.append_built_soon(object(), answers.append)
    durable = object()
    inner.pending[0](durable)  # still owned when durable: acknowledged
    owned[0] = False  # released (another broker took it) while the second was in flight
    inner.pending[1](durable)
    assert answers[0] is durable
    assert isinstance(answers[1], (NotLeaderOrFollowerError, BundleNotServedError))
    failure = RuntimeError("bookie gone")
    assert plog.append_built_soon(object(), answers.append)
    inner.pending[2](failure)  # a failure is passed on as it is
    assert answers[2] is failure


@pytest.mark.parametrize("wrapper", WRAPPERS, ids=lambda w: w.__name__)
def test_a_log_without_append_soon_starts_nothing(wrapper: type) -> None:
    plog = _wrap(wrapper, object(), [True])
    assert plog.append_built_soon(object(), lambda result: None) is False
