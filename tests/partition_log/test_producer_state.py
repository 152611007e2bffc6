"""Idempotent producer rules (Kafka's ProducerStateManager), without any I/O."""

from __future__ import annotations

import pytest

from gateway.topics.producer_state import ProducerStateManager
from protocols.kafka.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from protocols.kafka.record_batch import MAX_SEQUENCE, parse_header
from protocols.kafka.record_batch import build_batch as _build


def header(pid: int, epoch: int, seq: int, count: int = 1, base_offset: int = 0):  # type: ignore[no-untyped-def]
    data = _build([(None, b"x")] * count, producer_id=pid, producer_epoch=epoch,
                  base_sequence=seq, base_offset=base_offset, timestamp_ms=1)
    return parse_header(data)


def appended(state: ProducerStateManager, pid: int, epoch: int, seq: int, count: int,
             offset: int) -> None:
    h = header(pid, epoch, seq, count, offset)
    assert state.check(h) is None
    state.update(h, offset, now_ms=0)


def test_in_sequence_duplicate_gap_and_fencing() -> None:
    state = ProducerStateManager()
    appended(state, 1, 0, 0, 3, 0)
    appended(state, 1, 0, 3, 2, 3)
    dup = state.check(header(1, 0, 0, 3))
    assert dup is not None and (dup.first_offset, dup.last_offset) == (0, 2)
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(1, 0, 6))  # expected 5
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(1, 0, 1, 2))  # overlaps, not an exact retry
    appended(state, 1, 1, 0, 1, 5)  # a new epoch starts at 0
    with pytest.raises(InvalidProducerEpochError):
        state.check(header(1, 0, 5))
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(1, 2, 7))  # a newer epoch must start at 0
    with pytest.raises(InvalidProducerEpochError):
        state.check(header(1, 0, 0, 3))


def test_only_last_five_batches_are_deduplicated() -> None:
    state = ProducerStateManager()
    for i in range(7):
        appended(state, 2, 0, i, 1, i)
    assert state.check(header(2, 0, 2)) is not None
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(2, 0, 1))  # fell out of the window


def test_unknown_producer_may_start_anywhere_and_sequence_wraps() -> None:
    state = ProducerStateManager()
    appended(state, 3, 0, MAX_SEQUENCE - 1, 2, 0)
    h = header(3, 0, MAX_SEQUENCE - 1, 2)
    assert h.last_sequence == MAX_SEQUENCE
    appended(state, 3, 0, 0, 3, 2)  # wraps to 0
    wrapping = header(3, 0, 3, 1)
    assert state.check(wrapping) is None
    big = header(4, 0, MAX_SEQUENCE, 3)
    assert big.last_sequence == 1


def test_snapshot_roundtrip_and_bad_snapshots() -> None:
    state = ProducerStateManager()
    appended(state, 1, 4, 0, 2, 10)
    doc = state.snapshot(12)
    restored = ProducerStateManager.restore(doc)
    assert restored is not None
    copy, offset = restored
    assert offset == 12
    assert copy.check(header(1, 4, 0, 2)) is not None
    assert ProducerStateManager.restore({"format": 99}) is None
    assert ProducerStateManager.restore({"format": 1, "producers": [[1]]}) is None


def test_expire_and_truncate() -> None:
    state = ProducerStateManager()
    h = header(1, 0, 0)
    state.update(h, 0, now_ms=0)
    state.update(header(2, 0, 0), 5, now_ms=1_000)
    assert state.expire(now_ms=1_500, max_idle_ms=1_000) == 1
    assert list(state.producers) == [2]
    state.truncate_before(6)
    assert len(state) == 0


def test_a_batch_ahead_of_the_sequence_awaits_earlier_batches_nothing_else_does() -> None:
    state = ProducerStateManager()
    assert not state.awaits_earlier_batches(header(1, 0, 7))  # unknown producer: any sequence
    appended(state, 1, 0, 0, 3, 0)
    assert state.awaits_earlier_batches(header(1, 0, 5))  # 3 and 4 may still be on their way
    assert not state.awaits_earlier_batches(header(1, 0, 3))  # in sequence
    assert not state.awaits_earlier_batches(header(1, 0, 0, 3))  # a retry
    assert not state.awaits_earlier_batches(header(1, 0, 1))  # behind: refused at once
    assert not state.awaits_earlier_batches(header(1, 1, 5))  # another epoch: check decides
    assert not state.awaits_earlier_batches(header(-1, -1, -1))
    wrapping = ProducerStateManager()
    appended(wrapping, 2, 0, MAX_SEQUENCE - 1, 1, 0)
    assert wrapping.awaits_earlier_batches(header(2, 0, 1))  # MAX and 0 are missing
    assert not wrapping.awaits_earlier_batches(header(2, 0, MAX_SEQUENCE))
