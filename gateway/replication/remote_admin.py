"""What this cluster asks of another cluster's admin API: its checkpoints' offset pairs.

    GET {admin_url}/admin/v1/replication/{topic}/inbound
        {"cluster": NAME, "partitions": {"P": {"Y": {"inbound": [[b, y], ...], "scanned": S,
                                                    "unnoted": U, "syncs": [[b, y], ...]},
                                               ...}, ...}}

(served by gateway/admin/replication_routes.py from the remote's checkpoints, one per other
cluster Y; read as offset_translation.py's LinkView.  A remote from before "unnoted" and
"syncs" were served is read with U = S and no syncs: it may have passed records unnoted).
The request authenticates as the Kafka link does: HTTP Basic with the registered SASL user
and password when there is one (the admin API checks Basic against the SCRAM credentials SASL
uses), and trusts the registered CA file for https.  The password goes only
over https or to a loopback address (an unauthenticated admin API listens on loopback only),
and a redirect is never followed (it would carry the Authorization header elsewhere).  No
admin URL registered: nothing can be fetched (`RemoteAdminError`), so offsets among three or
more clusters are not pushed to that cluster.

An answer is read within TIMEOUT_S in all and up to MAX_ANSWER_BYTES (a checkpoint keeps at
most 64 inbound pairs and 64 syncs per partition and cluster: a few KB): a longer or endless
one, from a remote or anything else at that URL, is cut off as `AnswerTooLarge`, never held.

This module must never log or raise the password, nor send it in clear over the network.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import ssl
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlsplit

import trio

from gateway.replication.clusters import RemoteCluster
from gateway.replication.offset_translation import LinkView

TIMEOUT_S = 10.0
# fetches in worker threads at once, per remote: a hung remote's abandoned fetches (up to
# TIMEOUT_S each) hold its own tokens, neither the process's shared thread tokens nor those
# of the other remotes (one shared limiter let a hung remote with many topics starve them)
FETCHES_PER_REMOTE = 4
_fetches: dict[str, trio.CapacityLimiter] = {}
MAX_ANSWER_BYTES = 64 << 20  # ~10k partitions of three clusters' full checkpoints
_CHUNK = 64 << 10


def _limiter(cluster: RemoteCluster) -> trio.CapacityLimiter:
    limiter = _fetches.get(cluster.name)
    if limiter is None:
        limiter = _fetches[cluster.name] = trio.CapacityLimiter(FETCHES_PER_REMOTE)
    return limiter

Inbound = dict[int, dict[str, LinkView]]  # partition -> other cluster -> the remote's view


class RemoteAdminError(Exception):
    """The remote's admin API could not answer (not registered, unreachable, refused)."""


class AnswerTooLarge(RemoteAdminError):
    """The remote's answer is longer than MAX_ANSWER_BYTES or slower than TIMEOUT_S."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is raised as an HTTPError


def _in_clear_off_host(url: str) -> bool:
    """Whether a request to `url` would cross the network unencrypted."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return False
    host = parts.hostname or ""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def _request(cluster: RemoteCluster, target: str) -> urllib.request.Request:
    headers = {"Accept": "application/json"}
    if cluster.sasl_user:
        if _in_clear_off_host(cluster.admin_url):
            raise RemoteAdminError(f"{cluster.name}'s admin URL is not https: its password is "
                                   "not sent in clear")
        token = f"{cluster.sasl_user}:{cluster.sasl_password}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
    return urllib.request.Request(cluster.admin_url.rstrip("/") + target, headers=headers)


def _get(cluster: RemoteCluster, target: str) -> Any:
    context = None
    if cluster.admin_url.startswith("https:"):
        context = ssl.create_default_context(cafile=cluster.ssl_cafile or None)
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context),
                                         _NoRedirects())
    try:
        with opener.open(_request(cluster, target), timeout=TIMEOUT_S) as answer:
            return json.loads(_read_capped(cluster, answer, time.monotonic() + TIMEOUT_S))
    except urllib.error.HTTPError as exc:
        exc.close()  # its answer's socket
        raise RemoteAdminError(f"{cluster.name}'s admin API answered {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise RemoteAdminError(f"{cluster.name}'s admin API: {type(exc).__name__}") from None


def _read_capped(cluster: RemoteCluster, answer: Any, deadline: float) -> bytes:
    """The answer's body, refused once it passes MAX_ANSWER_BYTES (announced or read) or
    `deadline` (a body dripped slowly enough to dodge the socket timeout)."""
    announced = answer.headers.get("Content-Length")
    if announced is not None and announced.isdigit() and int(announced) > MAX_ANSWER_BYTES:
        raise AnswerTooLarge(f"{cluster.name}'s admin API announced an answer of {announced} "
                             f"bytes, more than {MAX_ANSWER_BYTES}")
    body = bytearray()
    while chunk := answer.read(_CHUNK):
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise AnswerTooLarge(f"{cluster.name}'s admin API answered more than "
                                 f"{MAX_ANSWER_BYTES} bytes")
        if time.monotonic() > deadline:
            raise AnswerTooLarge(f"{cluster.name}'s admin API took over {TIMEOUT_S:g} s to "
                                 "answer")
    return bytes(body)


def _pairs(doc: Any) -> tuple[tuple[int, int], ...]:
    return tuple((int(b), int(y)) for b, y in doc)


def _view(doc: Any) -> LinkView:
    scanned = int(doc["scanned"])
    return LinkView(_pairs(doc["inbound"]), scanned, int(doc.get("unnoted", scanned)),
                    _pairs(doc.get("syncs", ())))


async def fetch_inbound(cluster: RemoteCluster, topic: str) -> Inbound:
    """The remote's view of `topic` per partition and other cluster (see the module
    docstring)."""
    if not cluster.admin_url:
        raise RemoteAdminError(f"cluster {cluster.name} has no admin URL registered")
    target = f"/admin/v1/replication/{quote(topic, safe='')}/inbound"
    doc = await trio.to_thread.run_sync(_get, cluster, target, abandon_on_cancel=True,
                                        limiter=_limiter(cluster))
    try:
        return {int(p): {str(y): _view(v) for y, v in by_cluster.items()}
                for p, by_cluster in doc["partitions"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise RemoteAdminError(f"{cluster.name}'s admin API: malformed inbound pairs") from None
