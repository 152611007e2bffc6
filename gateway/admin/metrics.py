"""Prometheus text-format metrics, pulled from the components when /metrics is scraped.

Nothing here is global: the components keep plain counters (a bookie's read cache hits and
misses, its disk usage, a partition's high watermark, a group's committed offsets) and the two
places that need timing get an observer object passed in -- `BrokerMetrics.observe_request`
(set as `KafkaBroker.request_observer`) and a `Histogram.observe` (set as a bookie journal's
`fsync_observer`).  `render_metrics` reads them all and writes the exposition format
(https://prometheus.io/docs/instrumenting/exposition_formats/, text 0.0.4).

This module must never block, open sockets, or change the components it reads.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                     2.5, 5.0, 10.0)
_BATCH_HEADER = 61


class Histogram:
    """A cumulative-bucket histogram (seconds), as Prometheus expects it."""

    def __init__(self, buckets: Sequence[float] = LATENCY_BUCKETS_S) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)  # per bucket, not cumulative
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
                break

    def cumulative(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, n in zip(self.buckets, self.counts, strict=True):
            running += n
            out.append((_fmt(bound), running))
        out.append(("+Inf", self.count))
        return out


def count_records(records: Any) -> tuple[int, int]:
    """(bytes, records) of a RecordBatch v2 sequence (bytes, memoryview or a list of them)."""
    if records is None:
        return 0, 0
    if isinstance(records, list | tuple):
        total_bytes = total_records = 0
        for part in records:
            b, r = count_records(part)
            total_bytes += b
            total_records += r
        return total_bytes, total_records
    view = memoryview(records)
    pos, n = 0, 0
    while pos + _BATCH_HEADER <= len(view):
        batch_length = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
        if batch_length < _BATCH_HEADER - 12:
            break
        n += int.from_bytes(view[pos + 57:pos + 61], "big", signed=True)
        pos += 12 + batch_length
    return len(view), n


@dataclass
class TopicTraffic:
    produce_bytes: int = 0
    produce_messages: int = 0
    fetch_bytes: int = 0
    fetch_messages: int = 0


@dataclass
class BrokerMetrics:
    """Counters the Kafka broker feeds through `observe_request` (request_observer)."""

    api_latency: dict[str, Histogram] = field(default_factory=dict)
    api_errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    traffic: dict[str, TopicTraffic] = field(default_factory=lambda: defaultdict(TopicTraffic))
    topic_names_by_id: Any = None  # callable: topic_id -> name (fetch v13+ answers by id)

    def observe_request(self, api_name: str, seconds: float, body: Mapping[str, Any] | None,
                        response: Mapping[str, Any] | None) -> None:
        hist = self.api_latency.get(api_name)
        if hist is None:
            hist = self.api_latency[api_name] = Histogram()
        hist.observe(seconds)
        try:
            if api_name == "Produce" and body is not None:
                self._count_produce(body, response)
            elif api_name == "Fetch" and response is not None:
                self._count_fetch(response)
        except (TypeError, ValueError, KeyError, AttributeError):
            self.api_errors[api_name] += 1  # an odd body is not worth failing a request over

    def _count_produce(self, body: Mapping[str, Any], response: Mapping[str, Any] | None) -> None:
        failed: set[tuple[str, int]] = set()
        for t in (response or {}).get("responses") or []:
            for p in t.get("partition_responses") or []:
                if p.get("error_code"):
                    failed.add((t.get("name"), int(p.get("index", 0))))
        for t in body.get("topic_data") or []:
            name = t.get("name")
            for p in t.get("partition_data") or []:
                if (name, int(p.get("index", 0))) in failed:
                    continue
                nbytes, nrecords = count_records(p.get("records"))
                traffic = self.traffic[name]
                traffic.produce_bytes += nbytes
                traffic.produce_messages += nrecords

    def _count_fetch(self, response: Mapping[str, Any]) -> None:
        for t in response.get("responses") or []:
            name = t.get("topic")
            if not name and self.topic_names_by_id is not None:
                name = self.topic_names_by_id(t.get("topic_id"))
            if not name:
                continue
            for p in t.get("partitions") or []:
                nbytes, nrecords = count_records(p.get("records"))
                if nbytes:
                    traffic = self.traffic[name]
                    traffic.fetch_bytes += nbytes
                    traffic.fetch_messages += nrecords


@dataclass
class BookieGauges:
    """What one bookie exposes (filled from its storage by the admin API)."""

    bookie_id: str
    state: str
    disk_used_bytes: int
    disk_total_bytes: int
    read_cache_hits: int
    read_cache_misses: int
    journal_fsync: Histogram | None


@dataclass
class MetricsSnapshot:
    """Everything one scrape shows; the admin API gathers it (async parts included)."""

    broker: BrokerMetrics
    partitions: list[dict[str, Any]]  # topic, partition, log_start, log_end, ledgers, bytes
    group_lag: list[tuple[str, str, int, int]]  # group, topic, partition, lag
    bookies: list[BookieGauges]
    under_replicated_ledgers: int
    started_at: float = field(default_factory=time.time)


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _labels(labels: Mapping[str, Any]) -> str:
    if not labels:
        return ""
    parts = []
    for k, v in labels.items():
        text = str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        parts.append(f'{k}="{text}"')
    return "{" + ",".join(parts) + "}"


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: Mapping[str, Any], value: float) -> None:
        self.lines.append(f"{name}{_labels(labels)} {_fmt(value)}")

    def histogram(self, name: str, labels: Mapping[str, Any], hist: Histogram) -> None:
        for bound, cumulative in hist.cumulative():
            self.sample(f"{name}_bucket", {**labels, "le": bound}, cumulative)
        self.sample(f"{name}_sum", labels, hist.sum)
        self.sample(f"{name}_count", labels, hist.count)


def _ratio(hits: int, misses: int) -> float:
    return hits / (hits + misses) if hits + misses else 0.0


def render_metrics(snap: MetricsSnapshot) -> str:
    """The Prometheus text exposition of one snapshot."""
    w = _Writer()
    traffic = sorted(snap.broker.traffic.items())
    for metric, attr, help_text in (
        ("ledgerwire_topic_produce_bytes_total", "produce_bytes", "bytes produced to a topic"),
        ("ledgerwire_topic_produce_messages_total", "produce_messages", "records produced"),
        ("ledgerwire_topic_fetch_bytes_total", "fetch_bytes", "bytes fetched from a topic"),
        ("ledgerwire_topic_fetch_messages_total", "fetch_messages", "records fetched"),
    ):
        w.family(metric, "counter", help_text)
        for topic, t in traffic:
            w.sample(metric, {"topic": topic}, getattr(t, attr))
    w.family("ledgerwire_request_latency_seconds", "histogram",
             "Kafka request handling time per API")
    for api, hist in sorted(snap.broker.api_latency.items()):
        w.histogram("ledgerwire_request_latency_seconds", {"api": api}, hist)
    w.family("ledgerwire_consumer_group_lag", "gauge",
             "log end offset minus the group's committed offset")
    for group, topic, partition, lag in snap.group_lag:
        w.sample("ledgerwire_consumer_group_lag",
                 {"group": group, "topic": topic, "partition": partition}, lag)
    _partition_families(w, snap.partitions)
    _bookie_families(w, snap.bookies)
    w.family("ledgerwire_under_replicated_ledgers", "gauge",
             "ledgers marked under-replicated by the auditor")
    w.sample("ledgerwire_under_replicated_ledgers", {}, snap.under_replicated_ledgers)
    w.family("ledgerwire_cache_hit_ratio", "gauge", "hits / (hits + misses) per cache")
    hits = sum(b.read_cache_hits for b in snap.bookies)
    misses = sum(b.read_cache_misses for b in snap.bookies)
    w.sample("ledgerwire_cache_hit_ratio", {"cache": "bookie_read"}, _ratio(hits, misses))
    w.family("ledgerwire_start_time_seconds", "gauge", "process start, unix seconds")
    w.sample("ledgerwire_start_time_seconds", {}, snap.started_at)
    return "\n".join(w.lines) + "\n"


def _partition_families(w: _Writer, partitions: Iterable[dict[str, Any]]) -> None:
    rows = list(partitions)
    for metric, key, help_text in (
        ("ledgerwire_partition_ledgers", "ledgers", "ledgers in a partition's managed ledger"),
        ("ledgerwire_partition_size_bytes", "bytes", "stored bytes of a partition"),
        ("ledgerwire_partition_log_end_offset", "log_end", "high watermark"),
        ("ledgerwire_partition_log_start_offset", "log_start", "first offset still stored"),
    ):
        w.family(metric, "gauge", help_text)
        for row in rows:
            w.sample(metric, {"topic": row["topic"], "partition": row["partition"]}, row[key])
    w.family("ledgerwire_ledgers", "gauge", "ledgers held by the partitions open here")
    w.sample("ledgerwire_ledgers", {}, sum(r["ledgers"] for r in rows))
    compacted = [r for r in rows if r.get("compaction")]
    for metric, key, help_text in (
        ("ledgerwire_compaction_bytes_before", "bytes_before", "bytes of the last pass' input"),
        ("ledgerwire_compaction_bytes_after", "bytes_after", "bytes of the last pass' output"),
        ("ledgerwire_compaction_keys", "keys", "distinct keys the last pass found"),
        ("ledgerwire_compaction_last_run_timestamp_ms", "finished_ms", "when the last pass ended"),
        ("ledgerwire_compaction_dirty_ratio", "dirty_ratio",
         "uncompacted share of the cleanable ledgers at the last pass"),
        ("ledgerwire_compaction_lag_offsets", "lag", "offsets above the compaction point"),
        ("ledgerwire_compaction_passes", "passes", "compaction passes that rewrote ledgers"),
    ):
        if not compacted:
            break
        w.family(metric, "gauge", help_text)
        for row in compacted:
            w.sample(metric, {"topic": row["topic"], "partition": row["partition"]},
                     row["compaction"][key])


def _bookie_families(w: _Writer, bookies: Sequence[BookieGauges]) -> None:
    w.family("ledgerwire_bookie_disk_used_bytes", "gauge", "used bytes of a bookie's filesystem")
    for b in bookies:
        w.sample("ledgerwire_bookie_disk_used_bytes", {"bookie": b.bookie_id}, b.disk_used_bytes)
    w.family("ledgerwire_bookie_disk_total_bytes", "gauge", "size of a bookie's filesystem")
    for b in bookies:
        w.sample("ledgerwire_bookie_disk_total_bytes", {"bookie": b.bookie_id},
                 b.disk_total_bytes)
    w.family("ledgerwire_bookie_read_only", "gauge", "1 when the bookie refuses writes")
    for b in bookies:
        w.sample("ledgerwire_bookie_read_only", {"bookie": b.bookie_id},
                 1 if b.state == "read-only" else 0)
    w.family("ledgerwire_bookie_read_cache_hits_total", "counter", "bookie read cache hits")
    for b in bookies:
        w.sample("ledgerwire_bookie_read_cache_hits_total", {"bookie": b.bookie_id},
                 b.read_cache_hits)
    w.family("ledgerwire_bookie_read_cache_misses_total", "counter", "bookie read cache misses")
    for b in bookies:
        w.sample("ledgerwire_bookie_read_cache_misses_total", {"bookie": b.bookie_id},
                 b.read_cache_misses)
    w.family("ledgerwire_journal_fsync_seconds", "histogram",
             "bookie journal group write + fsync time")
    for b in bookies:
        if b.journal_fsync is not None:
            w.histogram("ledgerwire_journal_fsync_seconds", {"bookie": b.bookie_id},
                        b.journal_fsync)
