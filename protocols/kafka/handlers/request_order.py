"""Kafka's per-connection ordering, kept while a connection's requests run concurrently.

A Kafka broker handles one request per connection at a time, and clients rely on the order
that gives them: batches pipelined on a connection are appended in the order they were sent,
two pipelined OffsetCommits land in order, a CreateTopics is done before the Metadata sent
after it.  This broker runs a connection's requests concurrently (a long-polling Fetch must not
hold up everything behind it) and restores exactly those guarantees:

* Fetch is read-only and waits for nothing (it may not see a Produce pipelined just before it
  on the same connection; clients do not rely on that).
* Every other request starts only after the earlier non-Fetch requests of the connection have
  finished, except that a Produce need not wait for earlier Produces to be *acknowledged*:
  it waits only until they have *issued* their appends (see below), so their durability waits
  overlap.
* Produce appends are issued in request order.  PartitionLog.append takes its offset
  synchronously when called (before its first checkpoint), so a request signals "issued" right
  before its last partition calls append, and the next Produce wakes only after that call has
  taken its offset.

Turns are handed out by `ConnectionOrder.admit`, called synchronously in the order requests
were read.  Every dependency points to an earlier request, so there are no cycles.

This module must never make one connection wait for another.
"""

from __future__ import annotations

import trio

PRODUCE = 0
FETCH = 1


class RequestTurn:
    """One request's place in its connection's order."""

    __slots__ = ("api_key", "_waits", "_previous_append", "_issued", "_remaining", "_done")

    def __init__(self, api_key: int, waits: list[trio.Event],
                 previous_append: trio.Event | None) -> None:
        self.api_key = api_key
        self._waits = waits
        self._previous_append = previous_append
        self._issued = trio.Event()
        self._remaining = 0
        self._done = trio.Event()

    async def wait_until_ready(self) -> None:
        """Return when the earlier requests this one must follow have finished."""
        for event in self._waits:
            if not event.is_set():
                await event.wait()
        self._waits = []

    def finished(self) -> None:
        """The request is answered (or failed): later requests may go."""
        self._issued.set()  # a Produce that never appended must not hold up the next one
        self._done.set()

    @property
    def done(self) -> trio.Event:
        return self._done

    # --- Produce: append order ---------------------------------------------------------------

    def expect_appends(self, partitions: int) -> None:
        """How many partition appends this Produce will issue (0: issued at once)."""
        self._remaining = partitions
        if partitions <= 0:
            self._issued.set()

    async def wait_for_append_turn(self) -> None:
        """Return when every earlier Produce has issued its appends.

        The caller must call `append_issued` and then append *without a checkpoint between*.
        No checkpoint when it is already this Produce's turn (the usual case): the task would
        only be rescheduled once more per partition before the append it is about to issue.
        """
        previous = self._previous_append
        if previous is not None and not previous.is_set():
            await previous.wait()

    def append_issued(self) -> None:
        """One partition is about to append (or gave up); the last one releases the next Produce."""
        self._remaining -= 1
        if self._remaining <= 0:
            self._issued.set()

    @property
    def issued(self) -> trio.Event:
        return self._issued


class ConnectionOrder:
    """Hands out RequestTurns in the order a connection's requests were read.

    Unfinished Produce turns and other (non-Fetch) turns are kept apart: a Produce waits only
    for the others, so admitting one never walks the (possibly long) list of Produces in
    flight; that list is pruned when it has doubled since its last pruning, or when a request
    that must wait for it arrives.
    """

    __slots__ = ("_produces", "_others", "_prune_at", "_last_append")

    def __init__(self) -> None:
        self._produces: list[RequestTurn] = []  # unfinished Produces, oldest first
        self._others: list[RequestTurn] = []  # unfinished other non-Fetch requests
        self._prune_at = 16
        self._last_append: trio.Event | None = None

    @staticmethod
    def _unfinished(turns: list[RequestTurn]) -> list[RequestTurn]:
        return [turn for turn in turns if not turn.done.is_set()]

    def admit(self, api_key: int) -> RequestTurn:
        if api_key == FETCH:
            return RequestTurn(api_key, [], None)
        others = self._others
        if others:
            others = self._others = self._unfinished(others)
        if api_key == PRODUCE:
            turn = RequestTurn(api_key, [t.done for t in others], self._last_append)
            self._last_append = turn.issued
            produces = self._produces
            produces.append(turn)
            if len(produces) >= self._prune_at:
                produces = self._produces = self._unfinished(produces)
                self._prune_at = max(16, 2 * len(produces))
            return turn
        produces = self._produces = self._unfinished(self._produces)
        self._prune_at = max(16, 2 * len(produces))
        # Every earlier unfinished request (the order of the waits does not matter).
        turn = RequestTurn(api_key, [t.done for t in others] + [t.done for t in produces], None)
        others.append(turn)
        return turn
