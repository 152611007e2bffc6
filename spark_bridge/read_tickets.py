"""The driver's side of read tickets: obtain one for the job's principal, so that executors
read the topics' ledgers without the principal's password or the cluster's bookie secret.

With a principal named (authorization.py) and `ledgerwire.adminUrl` set to a broker's admin
API (http[s]://host:port), the driver asks POST /admin/v1/read-tickets?topic=... as that
principal (HTTP Basic with its Kafka password). The broker checks READ on every topic with its
own ACLs and answers a ticket signed with the bookie secret, naming the topics' ledgers and
expiring after `ledgerwire.readTicketTtl` seconds (default 3600). The reader then drops the
password from what Spark ships to the executors and gives them the ticket only
(ConnectionSpec.read_ticket); the bookies refuse every request outside it
(ledger_backend/bookie/read_ticket.py). A broker whose bookies have no secret answers 409:
then no ticket is needed (nor would one protect anything).

A batch read plans right after obtaining its ticket; a streaming read renews its own
(ticket_keeper.py). Not covered: the metadata reads (ZooKeeper or the standalone's SQLite
file), which the every-door issue secures.

This module must never log or put a password or a ticket into a message.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request

from spark_bridge.authorization import AuthorizationError, ReadPrincipal

ADMIN_URL_OPTION = "ledgerwire.adminUrl"
TTL_OPTION = "ledgerwire.readTicketTtl"


def obtain_read_ticket(admin_url: str, principal: ReadPrincipal, topics: list[str],
                       ttl_s: int = 3600, timeout_s: float = 30.0) -> str | None:  # fmt: skip
    """The ticket's text form, or None when the cluster's bookies need none;
    AuthorizationError if the broker refuses the principal or a topic; RuntimeError if it
    cannot be asked."""
    config = dict(principal.client_config)
    query = urllib.parse.urlencode([("topic", t) for t in sorted(set(topics))]
                                   + [("ttl_s", str(ttl_s))])  # fmt: skip
    url = f"{admin_url.rstrip('/')}/admin/v1/read-tickets?{query}"
    login = base64.b64encode(f"{principal.user}:{config.get('sasl.password', '')}"
                             .encode()).decode("ascii")  # fmt: skip
    request = urllib.request.Request(url, method="POST", data=b"",
                                     headers={"Authorization": f"Basic {login}"})
    who = f"User:{principal.user}"
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return str(json.load(answer)["ticket"])
    except urllib.error.HTTPError as exc:
        detail = _error_text(exc)
        if exc.code == 409:
            return None
        if exc.code == 401:
            raise AuthorizationError(f"the broker refused the login of {who} for a read "
                                     f"ticket: {detail}") from None  # fmt: skip
        if exc.code == 403:
            raise AuthorizationError(f"{who} may not read topics {', '.join(topics)} (the "
                                     f"broker refused a read ticket: {detail})") from None
        raise RuntimeError(f"the broker at {admin_url} did not issue a read ticket "
                           f"(HTTP {exc.code}: {detail})") from None
    except (OSError, ValueError, KeyError) as exc:
        raise RuntimeError(f"cannot get a read ticket from {admin_url} "
                           f"(option {ADMIN_URL_OPTION}): {exc}") from None


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read() or b"{}").get("error", exc.reason))
    except (ValueError, OSError, AttributeError):
        return str(exc.reason)


__all__ = ["ADMIN_URL_OPTION", "TTL_OPTION", "obtain_read_ticket"]
