"""The pure delivery engine: acquire, acknowledge, lock expiry, delivery-count limit, persistence
form (snapshot and deltas replay to the live state), and a hypothesis state machine that checks
the engine's promises under any interleaving."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gateway.delivery.delivery_state import (
    AckBatch,
    AckError,
    AckType,
    AcquiredRange,
    DeliveryPartition,
    DeliverySettings,
    RecordState,
)

ACCEPT, RELEASE, REJECT, GAP, RENEW = (
    AckType.ACCEPT,
    AckType.RELEASE,
    AckType.REJECT,
    AckType.GAP,
    AckType.RENEW,
)


def ack(first: int, last: int, *types: int, count: int | None = None) -> AckBatch:
    return AckBatch(first, last, tuple(int(t) for t in types), count)


def test_three_holders_split_new_records_and_accept_each_once() -> None:
    p = DeliveryPartition(0, DeliverySettings(lock_duration_ms=1000))
    a = p.acquire("a", 4, now_ms=0, fetchable_end=10)
    b = p.acquire("b", 4, now_ms=0, fetchable_end=10)
    c = p.acquire("c", 4, now_ms=0, fetchable_end=10)
    assert a == [AcquiredRange(0, 3, 1)]
    assert b == [AcquiredRange(4, 7, 1)]
    assert c == [AcquiredRange(8, 9, 1)]
    assert p.acquire("a", 4, now_ms=0, fetchable_end=10) == []
    for holder, ranges in (("b", b), ("a", a), ("c", c)):
        r = ranges[0]
        assert p.acknowledge(holder, [ack(r.first, r.last, ACCEPT)], now_ms=1).error == 0
    assert (p.start_offset, p.end_offset, p.records) == (10, 10, {})


def test_released_record_comes_back_with_delivery_count_two_and_rejected_never() -> None:
    p = DeliveryPartition(0)
    p.acquire("a", 3, now_ms=0, fetchable_end=3)
    assert p.acknowledge("a", [ack(0, 2, ACCEPT, RELEASE, REJECT)], now_ms=1).error == 0
    assert p.acquire("b", 10, now_ms=2, fetchable_end=3) == [AcquiredRange(1, 1, 2)]
    assert p.count(RecordState.ARCHIVED) == 1
    assert p.acknowledge("b", [ack(1, 1, ACCEPT)], now_ms=3).error == 0
    assert p.start_offset == 3 and p.records == {}
    assert p.stats.rejected == 1 and p.stats.redelivered == 1


def test_an_acquisition_given_back_is_available_at_once_uncounted_and_persists() -> None:
    """give_back (a read or dead-letter copy failed): the holder's records are available to
    another holder at once with the delivery not counted; never-delivered ones at the end move
    the end offset back; records acknowledged or taken again meanwhile are left alone; the
    delta a state log persists carries all of it."""
    p = DeliveryPartition(0, DeliverySettings(delivery_count_limit=2))
    p.acquire("a", 2, now_ms=0, fetchable_end=6)
    assert p.acknowledge("a", [ack(0, 1, RELEASE)], now_ms=1).error == 0
    taken = p.acquire("a", 6, now_ms=2, fetchable_end=6)
    assert taken == [AcquiredRange(0, 1, 2), AcquiredRange(2, 5, 1)]
    assert p.acknowledge("a", [ack(3, 3, ACCEPT)], now_ms=3).error == 0
    durable = DeliveryPartition.from_snapshot(p.snapshot())
    p.take_delta()
    assert p.give_back("a", taken) == [0, 1, 2, 4, 5]
    durable.apply_delta(p.take_delta() or {})
    for state in (p, durable):
        assert state.end_offset == 6 - 2 and state.state_of(2).delivery_count == 0
        assert [state.state_of(o).state for o in (0, 1, 2, 3)] == [
            RecordState.AVAILABLE, RecordState.AVAILABLE, RecordState.AVAILABLE,
            RecordState.ACKNOWLEDGED]
        assert state.acquire("b", 10, now_ms=4, fetchable_end=6) == [
            AcquiredRange(0, 1, 2), AcquiredRange(2, 2, 1), AcquiredRange(4, 5, 1)]
    assert p.give_back("a", taken) == []  # b holds them now


def test_lock_expiry_makes_records_available_to_others() -> None:
    p = DeliveryPartition(0, DeliverySettings(lock_duration_ms=100))
    p.acquire("dead", 5, now_ms=0, fetchable_end=5)
    assert p.acquire("alive", 5, now_ms=99, fetchable_end=5) == []
    assert p.next_deadline() == 100
    assert p.acquire("alive", 5, now_ms=100, fetchable_end=5) == [AcquiredRange(0, 4, 2)]
    result = p.acknowledge("dead", [ack(0, 4, ACCEPT)], now_ms=101)
    assert result.error == AckError.INVALID_RECORD_STATE
    assert p.stats.lock_expiries == 5


def test_delivery_count_limit_archives() -> None:
    p = DeliveryPartition(0, DeliverySettings(lock_duration_ms=10, delivery_count_limit=2))
    p.acquire("a", 1, now_ms=0, fetchable_end=1)
    assert p.acknowledge("a", [ack(0, 0, RELEASE)], now_ms=1).exhausted == []
    assert p.acquire("a", 1, now_ms=2, fetchable_end=1) == [AcquiredRange(0, 0, 2)]
    assert p.acknowledge("a", [ack(0, 0, RELEASE)], now_ms=3).exhausted == [0]
    assert p.acquire("a", 1, now_ms=4, fetchable_end=1) == []
    assert p.start_offset == 1 and p.stats.archived_by_limit == 1
    # expiry counts as a delivery too
    p.acquire("a", 1, now_ms=5, fetchable_end=2)
    p.acquire("a", 1, now_ms=20, fetchable_end=2)
    assert p.expire(40) == [1] and p.start_offset == 2


def test_acknowledgements_are_all_or_nothing_and_checked() -> None:
    p = DeliveryPartition(5)
    p.acquire("a", 4, now_ms=0, fetchable_end=9)
    bad = p.acknowledge("a", [ack(5, 6, ACCEPT), ack(8, 9, ACCEPT)], now_ms=1)
    assert bad.error == AckError.INVALID_RECORD_STATE
    assert p.count(RecordState.ACQUIRED) == 4, "nothing applied"
    assert p.acknowledge("b", [ack(5, 5, ACCEPT)], 1).error == AckError.INVALID_RECORD_STATE
    assert p.acknowledge("a", [ack(6, 5, ACCEPT)], 1).error == AckError.INVALID_REQUEST
    assert p.acknowledge("a", [ack(5, 7, ACCEPT, REJECT)], 1).error == AckError.INVALID_REQUEST
    assert p.acknowledge("a", [ack(5, 5, 9)], 1).error == AckError.INVALID_REQUEST
    assert p.acknowledge("a", [ack(4, 4, ACCEPT)], 1).error == AckError.INVALID_RECORD_STATE
    twice = p.acknowledge("a", [ack(5, 5, ACCEPT), ack(5, 5, ACCEPT)], 1)
    assert twice.error == AckError.INVALID_RECORD_STATE
    assert p.acknowledge("a", [ack(5, 8, GAP, ACCEPT, ACCEPT, ACCEPT)], 1).error == 0
    assert p.start_offset == 9


def test_renew_and_receipt_delivery_count() -> None:
    p = DeliveryPartition(0, DeliverySettings(lock_duration_ms=100))
    p.acquire("a", 1, now_ms=0, fetchable_end=1)
    assert p.acknowledge("a", [ack(0, 0, RENEW)], now_ms=90, lock_ms=500).error == 0
    assert p.next_deadline() == 590
    assert p.acquire("b", 1, now_ms=200, fetchable_end=1) == []
    # RocketMQ: anyone with the receipt of this delivery may settle it, an old receipt may not
    assert p.acknowledge(None, [ack(0, 0, ACCEPT, count=2)], 300).error != 0
    assert p.acknowledge(None, [ack(0, 0, ACCEPT, count=1)], 300).error == 0


def test_in_flight_window_is_bounded() -> None:
    p = DeliveryPartition(0, DeliverySettings(max_in_flight=3))
    assert p.acquire("a", 10, 0, 100) == [AcquiredRange(0, 2, 1)]
    assert not p.has_available(100)
    p.acknowledge("a", [ack(1, 2, ACCEPT)], 1)
    assert p.acquire("a", 10, 1, 100) == [], "offset 0 still holds the window"
    p.acknowledge("a", [ack(0, 0, ACCEPT)], 1)
    assert p.acquire("a", 10, 1, 100) == [AcquiredRange(3, 5, 1)]


def test_release_holder_skip_before_and_reset() -> None:
    p = DeliveryPartition(0)
    p.acquire("a", 3, 0, 10)
    p.acquire("b", 3, 0, 10)
    assert p.release_holder("a") == [0, 1, 2]
    assert p.state_of(1).state == RecordState.AVAILABLE
    p.skip_before(2)
    assert p.start_offset == 2 and 0 not in p.records
    p.skip_before(50)
    assert (p.start_offset, p.end_offset, p.records) == (50, 50, {})
    p.reset_start(7)
    assert p.acquire("a", 2, 0, 10) == [AcquiredRange(7, 8, 1)]


def _replayed(p: DeliveryPartition, deltas: list[dict[str, Any]]) -> DeliveryPartition:
    again = DeliveryPartition.from_snapshot(json.loads(json.dumps(deltas[0])))
    for delta in deltas[1:]:
        again.apply_delta(json.loads(json.dumps(delta)))
    return again


def test_deltas_and_snapshots_replay_to_the_same_state() -> None:
    p = DeliveryPartition(3, DeliverySettings(lock_duration_ms=50))
    deltas = [p.snapshot()]
    p.acquire("a", 5, 0, 20)
    deltas.append(p.take_delta())  # type: ignore[arg-type]
    p.acknowledge("a", [ack(3, 5, ACCEPT, RELEASE, ACCEPT)], 1)
    deltas.append(p.take_delta())  # type: ignore[arg-type]
    assert p.take_delta() is None
    p.acquire("b", 5, 60, 20)
    deltas.append(p.take_delta())  # type: ignore[arg-type]
    again = _replayed(p, deltas)
    assert (again.start_offset, again.end_offset, again.records) == (
        p.start_offset,
        p.end_offset,
        p.records,
    )


@pytest.mark.parametrize(
    "data",
    [
        {"start": -1, "end": 0},
        {"start": 5, "end": 4},
        {"start": 0, "end": 2, "records": [[0, 0, 7, 1, None, 0]]},
    ],
)
def test_bad_persisted_data_is_refused(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        DeliveryPartition.from_snapshot(data)


class DeliveryMachine(RuleBasedStateMachine):
    """Any interleaving of acquire / acknowledge / expiry / holder loss keeps the promises:
    an accepted record is never handed out again, nothing is lost (every offset below the end is
    accepted, archived or still in flight), delivery counts never pass the limit, and the
    persisted deltas replay to exactly the live state."""

    HOLDERS = ("a", "b", "c")

    @initialize(limit=st.integers(1, 4), window=st.integers(1, 30))
    def setup(self, limit: int, window: int) -> None:
        self.p = DeliveryPartition(
            0,
            DeliverySettings(lock_duration_ms=10, delivery_count_limit=limit, max_in_flight=window),
        )
        self.now = 0
        self.log_end = 0
        self.accepted: set[int] = set()
        self.archived: set[int] = set()
        self.held: dict[int, tuple[str, int]] = {}
        self.deltas = [self.p.snapshot()]

    @rule(n=st.integers(0, 5))
    def produce(self, n: int) -> None:
        self.log_end += n

    @rule(ms=st.integers(0, 15))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule(holder=st.sampled_from(HOLDERS), n=st.integers(0, 6))
    def acquire(self, holder: str, n: int) -> None:
        for r in self.p.acquire(holder, n, self.now, self.log_end):
            for offset in range(r.first, r.last + 1):
                assert offset not in self.accepted and offset not in self.archived
                assert 1 <= r.delivery_count <= self.p.settings.delivery_count_limit
                self.held[offset] = (holder, self.now + 10)
        self._persist()

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), kind=st.sampled_from([ACCEPT, RELEASE, REJECT, GAP, RENEW]))
    def acknowledge(self, data: st.DataObject, kind: AckType) -> None:
        offset = data.draw(st.sampled_from(sorted(self.held)))
        holder, deadline = self.held[offset]
        result = self.p.acknowledge(holder, [ack(offset, offset, kind)], self.now)
        if deadline <= self.now:  # the lock expired: the acknowledgement must be refused
            assert result.error == AckError.INVALID_RECORD_STATE
            del self.held[offset]
            self._persist()  # the call let expired locks go: every call's delta is persisted
            return
        assert result.error == 0
        if kind == RENEW:
            self.held[offset] = (holder, self.now + 10)
        else:
            del self.held[offset]
        if kind == ACCEPT:
            self.accepted.add(offset)
        elif kind in (REJECT, GAP) or result.exhausted:
            self.archived.add(offset)
        self._persist()

    @rule(holder=st.sampled_from(HOLDERS))
    def holder_leaves(self, holder: str) -> None:
        self.p.release_holder(holder)
        self.held = {o: h for o, h in self.held.items() if h[0] != holder}
        self._persist()

    def _persist(self) -> None:
        delta = self.p.take_delta()
        if delta is not None:
            self.deltas.append(json.loads(json.dumps(delta)))

    @invariant()
    def nothing_lost_and_replay_matches(self) -> None:
        p = self.p
        for offset in range(0, p.end_offset):
            state = p.state_of(offset)
            if offset in self.accepted:
                assert offset < p.start_offset or state.state == RecordState.ACKNOWLEDGED
            assert state.delivery_count <= p.settings.delivery_count_limit
        assert p.end_offset - p.start_offset <= p.settings.max_in_flight
        assert set(p.records) == set(range(p.start_offset, p.end_offset))
        again = _replayed(p, self.deltas)
        assert (again.start_offset, again.end_offset) == (p.start_offset, p.end_offset)
        assert again.records == p.records


TestDeliveryMachine = DeliveryMachine.TestCase
TestDeliveryMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
