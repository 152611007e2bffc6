"""Share-group membership (KIP-932) and share sessions, without I/O: joining, the share
assignment (partitions shared when members outnumber them), epochs and fencing, leaving and
session expiry, and the share-session epoch rules."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.share_group_coordinator import ShareGroupCoordinator, share_assignment
from protocols.kafka.share_sessions import ShareSessionCache

TOPICS = {"t": 2, "u": 1}


def beat(c: ShareGroupCoordinator, member: str, epoch: int, now: float = 0.0,
         topics: list[str] | None = None) -> Any:
    return c.heartbeat(group_id="g", member_id=member, member_epoch=epoch, rack_id=None,
                       subscribed_topic_names=topics, client_id="c", client_host="/h",
                       topics=TOPICS, now_ms=now)


def test_assignment_spreads_then_shares() -> None:
    two = share_assignment({"a": frozenset({"t"}), "b": frozenset({"t"})}, TOPICS)
    assert two == {"a": frozenset({("t", 0)}), "b": frozenset({("t", 1)})}
    three = share_assignment({m: frozenset({"t", "u"}) for m in "abc"}, TOPICS)
    assert all(("u", 0) in three[m] for m in "abc"), "one partition, shared by all"
    assert set().union(*three.values()) == {("t", 0), ("t", 1), ("u", 0)}
    assert share_assignment({"a": frozenset({"missing"})}, TOPICS) == {"a": frozenset()}


def test_join_heartbeat_fence_leave_and_expire() -> None:
    left: list[tuple[str, str]] = []
    c = ShareGroupCoordinator(on_leave=lambda g, m: left.append((g, m)))
    a, epoch = beat(c, "a", 0, topics=["t"])
    assert a.assigned == frozenset({("t", 0), ("t", 1)}) and a.member_epoch == epoch
    b, epoch_b = beat(c, "b", 0, topics=["t"])
    assert epoch_b > epoch and len(b.assigned) == 1
    a, _ = beat(c, "a", a.member_epoch, now=1000)
    assert a.member_epoch == epoch_b and len(a.assigned) == 1
    with pytest.raises(KafkaProtocolError) as fenced:
        beat(c, "a", a.member_epoch - 1)
    assert fenced.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(KafkaProtocolError) as unknown:
        beat(c, "zz", 3)
    assert unknown.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    member, _ = beat(c, "a", -1)
    assert member is None and left == [("g", "a")]
    c.expire(now_ms=1000 + 45_001)
    assert left == [("g", "a"), ("g", "b")] and c.groups["g"].state == "Empty"
    with pytest.raises(KafkaProtocolError) as bad:
        beat(c, "", 0, topics=["t"])
    assert bad.value.code == ErrorCode.INVALID_REQUEST


def test_share_session_epochs() -> None:
    cache = ShareSessionCache(max_sessions=1)
    with pytest.raises(KafkaProtocolError) as missing:
        cache.begin("g", "m", 1)
    assert missing.value.code == ErrorCode.SHARE_SESSION_NOT_FOUND
    session = cache.begin("g", "m", 0)
    session.partitions[(uuid.uuid4(), 0)] = None
    assert cache.begin("g", "m", 1) is session
    with pytest.raises(KafkaProtocolError) as wrong:
        cache.begin("g", "m", 1)
    assert wrong.value.code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.begin("g", "m", 2) is session
    with pytest.raises(KafkaProtocolError) as full:
        cache.begin("g", "other", 0)
    assert full.value.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert cache.begin("g", "m", 0) is not session, "epoch 0 replaces the session"
    assert cache.close("g", "m") is not None and len(cache) == 0
