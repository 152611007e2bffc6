"""A streaming query's read ticket, kept valid by the driver for every micro-batch.

A batch read plans right after obtaining its ticket (reader.py). A stream runs for days, its
topics roll to new ledgers, and a ticket names only the ledgers its topics had when the broker
issued it (gateway/admin/read_tickets.py) and expires. So the driver keeps one `TicketKeeper`
and asks it, before reading a ledger itself and before handing a micro-batch's splits to the
executors, for a ticket that names every ledger involved and still has at least half its
lifetime left; it asks the broker for a new one only when the current one falls short (a new
ledger or topic, or half the TTL gone), so a steady stream costs one HTTP call per ledger roll
or per half TTL, not one per micro-batch. The ticket travels inside each split
(stream_reader.StreamSplit): a task always holds a ticket for its own ledgers, valid for at
least half the TTL after its micro-batch was planned.

Why not a ticket naming the topic and bookies that look up which topic a ledger belongs to:
bookies would then need the cluster's metadata (they have none today and must not need it to
serve reads), and a lookup per new connection; the driver already reads that metadata to plan.

This module must never log or show a ticket or a password.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from ledger_backend.bookie.read_ticket import ReadTicket
from spark_bridge.authorization import ReadPrincipal
from spark_bridge.read_tickets import obtain_read_ticket

Obtain = Callable[[str, ReadPrincipal, list[str], int], "str | None"]


class TicketKeeper:
    """The driver's current ticket for a principal's topics; `covering` renews it as needed."""

    def __init__(self, admin_url: str, principal: ReadPrincipal, ttl_s: int, *,
                 obtain: Obtain = obtain_read_ticket,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self._admin_url = admin_url
        self._principal = principal
        self._ttl_s = ttl_s
        self._obtain = obtain
        self._clock = clock
        self._topics: frozenset[str] = frozenset()
        self._ticket: str | None = None
        self._ledgers: frozenset[int] = frozenset()
        self._expires_ms = 0
        self._not_needed = False  # the cluster's bookies have no secret (the broker said 409)
        self.issued = 0  # tickets obtained so far (tests and logs)

    def __repr__(self) -> str:
        return f"TicketKeeper(principal={self._principal!r}, issued={self.issued})"

    def _fresh(self) -> bool:
        remaining_ms = self._expires_ms - self._clock() * 1000
        return remaining_ms >= self._ttl_s * 1000 / 2

    def covering(self, topics: Iterable[str], ledgers: Iterable[int]) -> str | None:
        """A ticket for `topics` naming every ledger of `ledgers`, with at least half its TTL
        left (a new one when the current one is not); None when the bookies need none.
        AuthorizationError when the broker refuses the principal (a revoked ACL)."""
        if self._not_needed:
            return None
        wanted = frozenset(topics) | self._topics
        needed = frozenset(ledgers)
        if self._ticket is not None and wanted == self._topics and needed <= self._ledgers \
                and self._fresh():  # fmt: skip
            return self._ticket
        ticket = self._obtain(self._admin_url, self._principal, sorted(wanted), self._ttl_s)
        self.issued += 1
        if ticket is None:
            self._not_needed = True
            return None
        scope = ReadTicket.decode(ticket).scope
        # a ledger the broker did not list (its metadata view a moment behind ours, or the
        # ledger deleted meanwhile) is not in _ledgers: the next call asks again
        self._topics, self._ticket = wanted, ticket
        self._ledgers, self._expires_ms = scope.ledgers, scope.expires_ms
        return ticket


__all__ = ["TicketKeeper"]
