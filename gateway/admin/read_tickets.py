"""Issuing read tickets (ledger_backend/bookie/read_ticket.py) for Spark jobs: POST
/admin/v1/read-tickets?topic=a&topic=b[&ttl_s=N].

The caller authenticates as any admin request does (HTTP Basic with its Kafka password, or a
bearer token) and must hold READ on every named topic (the Access of the route, checked by
the admin app before this runs). The answer is one ticket, signed with the cluster's bookie
secret, naming every ledger the topics' partitions list now, valid for ttl_s seconds (default
one hour, at most a day): the job's driver hands it to the executors, which read those ledgers
from the bookies with it and with nothing else (no bookie secret, no password).

This module must never issue a ticket without the bookie secret's owner being this broker,
never name a ledger of a topic the route did not check, and never log a ticket.
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.admin.auth import Access, read_topic
from gateway.admin.http_server import HttpError, HttpRequest
from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.bookie.read_ticket import MAX_TICKET_LEDGERS, TicketError, issue_ticket
from ledger_backend.managed_ledger.factory import DEFAULT_ROOT
from ledger_backend.managed_ledger.metadata_format import (
    decode_managed_ledger,
    managed_ledger_path,
)
from ledger_backend.metadata.store import MetadataStore, NoNodeError

log = logging.getLogger("ledgerwire.admin")
DEFAULT_TTL_S = 3600
MAX_TTL_S = 24 * 3600
MAX_TOPICS = 64


def ticket_topics(q: HttpRequest) -> list[str]:
    topics = sorted(set(q.query.get("topic", [])))
    if not topics:
        raise HttpError(400, "name the topics to read: ?topic=NAME (repeatable)")
    if len(topics) > MAX_TOPICS:
        raise HttpError(400, f"at most {MAX_TOPICS} topics per ticket")
    return topics


def ticket_access(q: HttpRequest) -> Access:
    """READ on every topic of the request (one alternative holding all the checks); nobody
    passes a request that names none (403, as every route answers a principal without ACLs)."""
    if not q.query.get("topic"):
        return Access((), what="READ on the topics to read (name them: ?topic=NAME)")
    topics = ticket_topics(q)
    checks = tuple(read_topic(t).alternatives[0][0] for t in topics)
    return Access((checks,), what="READ on topic " + ", ".join(topics))


class ReadTicketIssuer:
    """Signs tickets for the ledgers of topics (`topics`: the topic service: topics(),
    refresh_topic(), managed_ledger_name())."""

    def __init__(self, store: MetadataStore, topics: Any, secret: BookieSecret | None) -> None:
        self._store = store
        self._topics = topics
        self._secret = secret

    async def _ledgers(self, topic: str) -> set[int]:
        info = self._topics.topics().get(topic) or await self._topics.refresh_topic(topic)
        if info is None:
            raise HttpError(404, f"topic {topic!r} does not exist")
        ledgers: set[int] = set()
        for p in range(info.partitions):
            path = managed_ledger_path(DEFAULT_ROOT, self._topics.managed_ledger_name(topic, p))
            try:
                data, _ = await self._store.get(path)
            except NoNodeError:
                continue  # nothing produced to this partition yet
            ledgers.update(r.ledger_id for r in decode_managed_ledger(data, path).ledgers)
        return ledgers

    async def issue(self, q: HttpRequest) -> dict[str, Any]:
        if self._secret is None:
            raise HttpError(409, "this cluster's bookies have no secret "
                                 "(storage.bookie_secret_file): they need no ticket")
        topics = ticket_topics(q)
        raw_ttl = q.arg("ttl_s", str(DEFAULT_TTL_S)) or ""
        if not raw_ttl.isdigit() or not 0 < int(raw_ttl) <= MAX_TTL_S:
            raise HttpError(400, f"ttl_s must be a whole number of seconds, 1 to {MAX_TTL_S}")
        ledgers: set[int] = set()
        for topic in topics:
            ledgers |= await self._ledgers(topic)
        if len(ledgers) > MAX_TICKET_LEDGERS:
            raise HttpError(400, f"the topics have {len(ledgers)} ledgers, more than one "
                                 f"ticket names ({MAX_TICKET_LEDGERS}): ask per topic")
        principal = q.identity.principal if q.identity is not None else "ANONYMOUS"
        user = principal[len("User:"):] if principal.startswith("User:") else principal
        try:
            ticket = issue_ticket(self._secret.key, user, ledgers, ttl_s=int(raw_ttl))
        except TicketError as exc:
            raise HttpError(400, str(exc)) from exc
        log.info("read ticket for %s: topics %s, %d ledgers, %s s", principal,
                 ",".join(topics), len(ledgers), raw_ttl)  # fmt: skip
        return {"ticket": ticket.encode(), "principal": principal, "topics": topics,
                "ledgers": len(ledgers), "expires_ms": ticket.scope.expires_ms}


__all__ = ["ReadTicketIssuer", "ticket_access"]
