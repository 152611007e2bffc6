"""The admin listener of a `standalone --workers N` node: one admin API and one /metrics for
all of its worker processes.

Each worker serves its own admin surface on a private unix socket (in the node's private data
directory, or the private temporary directory of the metadata socket); the supervisor serves
the configured admin listener (with its TLS) and answers from them:

- GET /metrics: every worker's exposition, fetched over its socket with the scraper's own
  headers (each worker checks the credentials as it would on its own listener), parsed and
  written again as one exposition with a `worker` label ("0", "1", ...) on every sample.
  Parsing and writing are prometheus_client's (the Prometheus project's own client: the text
  format is parsed and escaped the way Prometheus does; nothing here handles the format by
  hand).  A worker that does not answer is left out (its samples are missing, the
  `ledgerwire_node_workers_scraped` gauge says how many answered); a worker that refuses the
  credentials (401/403) has its answer returned as is.
- GET /ready: every worker's /ready, asked at once; the node is ready (200) when every worker
  answered ready within READY_TIMEOUT_S, else 503.  The body names each worker's state
  ({"ready": false, "workers": {"0": "ready", "1": "no answer"}}).
- Everything else: forwarded to the first worker that answers, worker 0 first.  A worker that
  did not answer in time (stopped, SIGSTOPped, hung) is asked last for SUSPECT_S, so one silent
  worker costs one call a timeout, not every call.  Any worker can
  answer for the whole node: topics, groups, ACLs, users and configuration live in the shared
  metadata store, and a worker's admin calls for a partition it does not own work as on a
  cluster broker.  What a worker reports about itself (/ready, its own process) is that
  worker's.  Answers are buffered whole (the admin limits keep them small).

The Host header goes through unchanged (the console's same-origin check compares it with
Origin); the caller's scheme and address go in app.FORWARDED_HEADER, which a worker believes
on its unix socket only (ACL host rules, secure cookies), and which the supervisor replaces
whatever a caller sent.

HTTP to the workers is h11 (hypercorn's own HTTP/1.1 library) over trio unix streams, one
connection per call.  This module must never serve a worker's socket to anything but the
supervisor, and never parse or change what it forwards beyond the hop-by-hop headers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import h11
import trio
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from gateway.admin.app import FORWARDED_HEADER
from gateway.admin.http_server import Receive, Scope, Send, error_body

log = logging.getLogger("ledgerwire.supervisor")

WORKER_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 5.0  # a probe's answer: a worker silent this long is not ready
METRICS_TIMEOUT_S = 8.0  # under Prometheus' default 10 s scrape timeout
SUSPECT_S = 30.0
MAX_ANSWER_BYTES = 64 * 1024 * 1024
HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length",
              b"upgrade", b"te", b"trailer", b"proxy-connection"}

FORWARDED = FORWARDED_HEADER.encode()
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


async def call_worker(socket_path: str, method: bytes, target: bytes,
                      headers: Sequence[tuple[bytes, bytes]], body: bytes,
                      timeout_s: float | None = None) -> Answer:
    """One HTTP/1.1 request to a worker's admin socket: (status, headers, body).
    OSError, h11.ProtocolError or trio.TooSlowError when the worker does not answer (within
    `timeout_s`, WORKER_TIMEOUT_S when None)."""
    conn = h11.Connection(h11.CLIENT)
    sent = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]
    if not any(k.lower() == b"host" for k, _ in sent):
        sent.append((b"host", b"worker"))
    sent += [(b"connection", b"close"), (b"content-length", b"%d" % len(body))]
    with trio.fail_after(WORKER_TIMEOUT_S if timeout_s is None else timeout_s):
        stream = await trio.open_unix_socket(socket_path)
        async with stream:
            await stream.send_all(conn.send(h11.Request(method=method, target=target,
                                                        headers=sent)) or b"")
            try:
                await stream.send_all(conn.send(h11.Data(data=body)) or b"")
                await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
            except trio.BrokenResourceError:
                pass  # it answered without reading the body (a 401) and closed: read that
            status, answer_headers, chunks, size = 0, [], [], 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
                elif isinstance(event, h11.Response):
                    status, answer_headers = event.status_code, list(event.headers)
                elif isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > MAX_ANSWER_BYTES:
                        raise h11.RemoteProtocolError("worker answer too large")
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    return status, answer_headers, b"".join(chunks)
                elif isinstance(event, h11.ConnectionClosed):
                    raise h11.RemoteProtocolError("worker closed the connection")


class NodeAdmin:
    """The supervisor's ASGI application over the workers' admin sockets (index = worker)."""

    def __init__(self, worker_sockets: Sequence[str]) -> None:
        self.worker_sockets = list(worker_sockets)
        self._suspect_until = [0.0] * len(self.worker_sockets)  # trio clock, per worker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                pass
            return
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        client = (scope.get("client") or ("", 0))[0]
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != FORWARDED]
        headers.append((FORWARDED, f"{scope.get('scheme', 'http')} {client}".encode()))
        if scope["path"] == "/metrics" and scope["method"] == "GET":
            status, answer_headers, answer = await self.metrics(target, headers)
        elif scope["path"] == "/ready" and scope["method"] == "GET":
            status, answer_headers, answer = await self.ready(target, headers)
        else:
            status, answer_headers, answer = await self.forward(
                scope["method"].encode(), target, headers, bytes(body))
        answer_headers = [(k, v) for k, v in answer_headers if k.lower() not in HOP_BY_HOP]
        await send({"type": "http.response.start", "status": status,
                    "headers": answer_headers + [(b"content-length", b"%d" % len(answer))]})
        await send({"type": "http.response.body", "body": answer})

    async def forward(self, method: bytes, target: bytes,
                      headers: list[tuple[bytes, bytes]], body: bytes) -> Answer:
        """The first worker's answer, worker 0 first (one that does not answer: the next;
        one that lately did not answer in time: last)."""
        now = trio.current_time()
        order = sorted(range(len(self.worker_sockets)),
                       key=lambda i: (self._suspect_until[i] > now, i))
        for index in order:
            try:
                return await call_worker(self.worker_sockets[index], method, target, headers,
                                         body)
            except (OSError, h11.ProtocolError, trio.TooSlowError) as exc:
                if isinstance(exc, trio.TooSlowError):
                    self._suspect_until[index] = trio.current_time() + SUSPECT_S
                log.warning("admin call %s %s: worker %d did not answer (%s)", method.decode(),
                            target.decode(errors="replace")[:200], index, exc)
        return 503, [(b"content-type", b"application/json")], error_body(
            503, "no worker answered")

    async def ready(self, target: bytes, headers: list[tuple[bytes, bytes]]) -> Answer:
        """200 when every worker answers its /ready with 200, else 503; each one's state."""
        states = ["no answer"] * len(self.worker_sockets)

        async def probe(index: int, path: str) -> None:
            try:
                status, _, _ = await call_worker(path, b"GET", target, headers, b"",
                                                 timeout_s=READY_TIMEOUT_S)
            except (OSError, h11.ProtocolError, trio.TooSlowError):
                return
            states[index] = "ready" if status == 200 else "not ready"

        async with trio.open_nursery() as nursery:
            for index, path in enumerate(self.worker_sockets):
                nursery.start_soon(probe, index, path)
        ready = all(state == "ready" for state in states)
        body = json.dumps({"ready": ready,
                           "workers": {str(i): state for i, state in enumerate(states)}})
        return 200 if ready else 503, [(b"content-type", b"application/json")], body.encode()

    async def metrics(self, target: bytes, headers: list[tuple[bytes, bytes]]) -> Answer:
        """Every worker's exposition as one, each sample labelled with its worker."""
        answers: list[Answer | None] = [None] * len(self.worker_sockets)
        text_headers = [(k, v) for k, v in headers if k.lower() != b"accept"]

        async def scrape(index: int, path: str) -> None:
            try:
                answers[index] = await call_worker(path, b"GET", target, text_headers, b"",
                                                   timeout_s=METRICS_TIMEOUT_S)
            except (OSError, h11.ProtocolError, trio.TooSlowError) as exc:
                log.warning("metrics: worker %d did not answer (%s)", index, exc)

        async with trio.open_nursery() as nursery:
            for index, path in enumerate(self.worker_sockets):
                nursery.start_soon(scrape, index, path)
        for answer in answers:
            if answer is not None and answer[0] != 200:
                return answer  # refused (401/403) or failed: the scraper sees why
        families: dict[str, Metric] = {}
        for index, answer in enumerate(answers):
            if answer is None:
                continue
            for family in text_string_to_metric_families(answer[2].decode()):
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit)
                for sample in family.samples:
                    merged.samples.append(sample._replace(
                        labels={**sample.labels, "worker": str(index)}))
        scraped = GaugeMetricFamily("ledgerwire_node_workers_scraped",
                                    "Workers whose /metrics answered this scrape")
        scraped.add_metric([], sum(a is not None for a in answers))
        accept = next((v.decode() for k, v in headers if k.lower() == b"accept"), "")
        encoder, content_type = choose_encoder(accept)
        output = encoder(_Families([*families.values(), scraped]))  # type: ignore[arg-type]
        return 200, [(b"content-type", content_type.encode())], output


class _Families:
    """A registry-shaped holder for prometheus_client's encoders (they call collect())."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


__all__ = ["NodeAdmin", "call_worker"]
