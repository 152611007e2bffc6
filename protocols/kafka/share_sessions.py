"""KIP-932 share sessions: which partitions a share consumer fetches, and the session epoch.

A member opens its session with ShareFetch epoch 0 (replacing any earlier one), then numbers
every ShareFetch and ShareAcknowledge 1, 2, 3, ...; a request with another number gets
INVALID_SHARE_SESSION_EPOCH, one without a session SHARE_SESSION_NOT_FOUND.  Epoch -1 closes the
session (the broker then releases the records the member holds).  A ShareFetch adds its topics'
partitions to the session and drops ForgottenTopicsData; the fetch then covers the whole
session.  The cache is bounded (SHARE_SESSION_LIMIT_REACHED past it).

This module must never do I/O or know the delivery state.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from protocols.kafka.errors import ErrorCode, KafkaProtocolError

OPEN_EPOCH = 0
CLOSE_EPOCH = -1
MAX_EPOCH = 2**31 - 1


class ShareSessionError(KafkaProtocolError):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message, code=code)


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: dict[tuple[uuid.UUID, int], None] = field(default_factory=dict)  # ordered set


class ShareSessionCache:
    def __init__(self, max_sessions: int = 2_000) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def begin(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a request with `epoch` acts in (epoch 0 opens a new one; -1 names the
        one to close, which `close` then removes); raises ShareSessionError."""
        key = (group_id, member_id)
        if epoch == OPEN_EPOCH:
            if key not in self._sessions and len(self._sessions) >= self.max_sessions:
                raise ShareSessionError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                                        "too many share sessions")
            opened = self._sessions[key] = ShareSession(group_id, member_id)
            return opened
        session = self._sessions.get(key)
        if session is None:
            raise ShareSessionError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                                    f"no share session for member {member_id}")
        if epoch == CLOSE_EPOCH:
            return session
        if epoch != session.next_epoch:
            raise ShareSessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                    f"share session epoch {epoch}, expected {session.next_epoch}")
        session.next_epoch = 1 if epoch >= MAX_EPOCH else epoch + 1
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def drop_group(self, group_id: str) -> None:
        for key in [k for k in self._sessions if k[0] == group_id]:
            del self._sessions[key]
