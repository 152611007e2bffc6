"""Storage faults become codes clients retry (issue 24), for Kafka and RocketMQ alike.

A ledger-client failure that reaches a handler (recovery of the partition's last ledger could
not finish, the ZooKeeper session expired, a bookie timed out, too few bookies, fencing) is
answered NOT_ENOUGH_REPLICAS on Produce, KAFKA_STORAGE_ERROR on reads, NOT_LEADER_OR_FOLLOWER
when another owner fenced the ledger, RocketMQ SERVICE_NOT_AVAILABLE -- every one retried by
the clients -- with one rate-limited WARNING line and no traceback. Anything else stays
UNKNOWN_SERVER_ERROR with its traceback (a bug).
"""

from __future__ import annotations

import logging

import pytest

from ledger_backend.client.errors import (
    BKTimeoutError,
    LedgerFencedError,
    LedgerRecoveryError,
    NotEnoughBookiesError,
)
from ledger_backend.faults import StorageFault, storage_fault_of, warn_fault
from ledger_backend.managed_ledger.types import ManagedLedgerFencedError
from ledger_backend.metadata.store import SessionExpiredError
from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers.error_responses import error_code_of
from protocols.rocketmq import dispatch
from protocols.rocketmq.codec import make_request
from protocols.rocketmq.errors import ResponseCode

UNAVAILABLE = [LedgerRecoveryError("too few bookies answered"), SessionExpiredError("expired"),
               BKTimeoutError("slow bookie"), NotEnoughBookiesError("need 3, 2 available")]


@pytest.mark.parametrize("exc", UNAVAILABLE, ids=lambda e: type(e).__name__)
def test_unavailable_storage_is_retriable(exc: Exception, caplog: pytest.LogCaptureFixture
                                          ) -> None:  # fmt: skip
    with caplog.at_level(logging.WARNING):
        produce = error_code_of(exc, unavailable=ErrorCode.NOT_ENOUGH_REPLICAS)
        read = error_code_of(exc)
    assert produce is ErrorCode.NOT_ENOUGH_REPLICAS and produce.retriable
    assert read is ErrorCode.KAFKA_STORAGE_ERROR and read.retriable
    assert not any(r.exc_info for r in caplog.records)
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_fencing_means_the_partition_moved() -> None:
    for exc in (LedgerFencedError("fenced"), ManagedLedgerFencedError("taken")):
        assert error_code_of(exc, unavailable=ErrorCode.NOT_ENOUGH_REPLICAS) \
            is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_wrapped_and_grouped_faults_are_found() -> None:
    try:
        try:
            raise LedgerRecoveryError("inner")
        except LedgerRecoveryError as inner:
            raise RuntimeError("open failed") from inner
    except RuntimeError as outer:
        wrapped = outer
    assert storage_fault_of(wrapped) is StorageFault.UNAVAILABLE
    grouped = ExceptionGroup("one", [LedgerFencedError("x")])
    assert storage_fault_of(grouped) is StorageFault.MOVED
    assert storage_fault_of(ValueError("a bug")) is None


def test_a_bug_still_logs_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        assert error_code_of(ValueError("bug")) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert any(r.exc_info for r in caplog.records)


def test_warnings_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.faults.rate")
    with caplog.at_level(logging.WARNING, logger="test.faults.rate"):
        for _ in range(100):
            warn_fault(logger, "k", "bookie %s down", "b1", interval_s=3600)
        warn_fault(logger, "other", "another event", interval_s=3600)
    lines = [r.getMessage() for r in caplog.records if r.name == "test.faults.rate"]
    assert lines == ["bookie b1 down", "another event"]


class _Broker:
    pass


async def test_rocketmq_answers_storage_faults_with_a_retried_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def failing(broker: object, conn: object, request: object) -> object:
        raise LedgerRecoveryError("ledger 7: cannot tell whether entry 3 exists")

    async def buggy(broker: object, conn: object, request: object) -> object:
        raise ValueError("bug")

    monkeypatch.setitem(dispatch.BROKER_HANDLERS, 10, failing)
    response = await dispatch.dispatch(_Broker(), None, make_request(10))  # type: ignore[arg-type]
    assert response.code == ResponseCode.SERVICE_NOT_AVAILABLE
    monkeypatch.setitem(dispatch.BROKER_HANDLERS, 10, buggy)
    with pytest.raises(ValueError):
        await dispatch.dispatch(_Broker(), None, make_request(10))  # type: ignore[arg-type]


def test_log_failure_quiet_for_expected_faults_loud_for_bugs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from ledger_backend.faults import log_failure
    from protocols.kafka.errors import NotLeaderOrFollowerError

    logger = logging.getLogger("test.faults.log_failure")
    with caplog.at_level(logging.WARNING, logger="test.faults.log_failure"):
        for exc in (SessionExpiredError("expired"), NotLeaderOrFollowerError("moved"),
                    ConnectionResetError("peer gone")):
            try:
                raise exc
            except Exception:
                log_failure(logger, f"pass {type(exc).__name__} failed")
        try:
            raise KeyError("bug")
        except Exception:
            log_failure(logger, "retention of %s failed", "x", bug_level=logging.ERROR)
    records = [r for r in caplog.records if r.name == "test.faults.log_failure"]
    assert [r.levelno for r in records] == [logging.WARNING] * 3 + [logging.ERROR]
    assert [bool(r.exc_info) for r in records] == [False, False, False, True]


def test_log_failure_notes_a_unit_released_here_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An error marked `released_here` (RocketMQ's "bundle not served here"), also raised from
    another or in a group of one, is noted at DEBUG: no WARNING, no traceback."""
    from gateway.rocketmq.bundle_logs import BundleNotServedError
    from ledger_backend.faults import is_released_here, log_failure

    logger = logging.getLogger("test.faults.released")
    wrapped = RuntimeError("scan")
    wrapped.__cause__ = BundleNotServedError("bundle 3 not served here")
    cases = [BundleNotServedError("gone"), wrapped,
             BaseExceptionGroup("one", [BundleNotServedError("grouped")])]
    assert all(is_released_here(exc) for exc in cases)
    assert not is_released_here(ValueError("bug"))
    with caplog.at_level(logging.DEBUG, logger="test.faults.released"):
        for exc in cases:
            try:
                raise exc
            except BaseException:
                log_failure(logger, "delivery failed")
    records = [r for r in caplog.records if r.name == "test.faults.released"]
    assert [(r.levelno, bool(r.exc_info)) for r in records] == [(logging.DEBUG, False)] * 3


async def test_a_damaged_offloaded_object_is_told_not_retried_silently(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A missing or corrupt offloaded object (issue 18): Kafka reads CORRUPT_MESSAGE (handed to
    the application), Produce keeps NOT_ENOUGH_REPLICAS, RocketMQ SYSTEM_ERROR naming the
    object; an unreachable object store stays a silently retried fault."""
    from ledger_backend.offload import OffloadedObjectDamagedError, OffloadedReadError

    damaged = OffloadedObjectDamagedError("object 'a/7-x.lwo': block at 24 checksum mismatch")
    out_of_reach = OffloadedReadError("object 'a/7-x.lwo': get failed: ConnectError")
    with caplog.at_level(logging.WARNING):
        assert storage_fault_of(damaged) is StorageFault.DAMAGED
        assert error_code_of(damaged) is ErrorCode.CORRUPT_MESSAGE
        assert error_code_of(damaged, unavailable=ErrorCode.NOT_ENOUGH_REPLICAS) \
            is ErrorCode.NOT_ENOUGH_REPLICAS
        assert storage_fault_of(out_of_reach) is StorageFault.UNAVAILABLE
        assert error_code_of(out_of_reach) is ErrorCode.KAFKA_STORAGE_ERROR
    assert not any(r.exc_info for r in caplog.records)

    async def reading(broker: object, conn: object, request: object) -> object:
        raise RuntimeError("pull failed") from damaged

    monkeypatch.setitem(dispatch.BROKER_HANDLERS, 11, reading)
    response = await dispatch.dispatch(_Broker(), None, make_request(11))  # type: ignore[arg-type]
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "a/7-x.lwo" in (response.remark or "")
