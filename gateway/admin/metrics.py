"""Broker metrics, pulled from the components when /metrics is scraped, exposed through
prometheus_client.

Nothing here is global: the components keep plain counters (a bookie's read cache hits and
misses, its disk usage, a partition's high watermark, a group's committed offsets) and the two
places that need timing get an observer object passed in -- `BrokerMetrics.observe_request`
(set as `KafkaBroker.request_observer`) and a `Histogram.observe` (set as a bookie journal's
`fsync_observer`); both stay plain integer arithmetic on the request path.  A scrape builds a
`SnapshotCollector` (a prometheus_client custom collector) over one snapshot, and
prometheus_client writes the exposition: the Prometheus text format 0.0.4, or OpenMetrics 1.0
when the scraper's Accept header asks for it.  Why prometheus_client: it is the Prometheus
project's own Python client, so names, escaping, histogram buckets and both formats are
written the way Prometheus parses them, and nothing here writes the format by hand.

This module must never block, open sockets, or change the components it reads.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

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
    capacity: Any = None  # gateway.cluster.bookie_capacity.BookieCapacity, if known
    # Kafka share groups: (group, topic, partition, gateway.delivery DeliveryStats, in flight)
    share_partitions: list[tuple[str, str, int, Any, int]] = field(default_factory=list)
    # geo-replication: gateway/replication ReplicatorStatus.to_json() rows
    replication: list[dict[str, Any]] = field(default_factory=list)
    # records copied to share groups' dead-letter topics: (group, topic, partition) -> count
    share_dead_lettered: dict[tuple[str, str, int], int] = field(default_factory=dict)


def _fmt(value: float) -> str:
    """A bucket bound as Prometheus writes it ("0.25", "5", "+Inf")."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _ratio(hits: int, misses: int) -> float:
    return hits / (hits + misses) if hits + misses else 0.0


def _histogram(family: HistogramMetricFamily, labels: list[str], hist: Histogram) -> None:
    family.add_metric(labels, [(bound, float(n)) for bound, n in hist.cumulative()], hist.sum)


class SnapshotCollector:
    """A prometheus_client collector over one snapshot (a fresh one per scrape)."""

    def __init__(self, snap: MetricsSnapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        snap = self.snap
        traffic = sorted(snap.broker.traffic.items())
        for metric, attr, help_text in (
            ("ledgerwire_topic_produce_bytes", "produce_bytes", "bytes produced to a topic"),
            ("ledgerwire_topic_produce_messages", "produce_messages", "records produced"),
            ("ledgerwire_topic_fetch_bytes", "fetch_bytes", "bytes fetched from a topic"),
            ("ledgerwire_topic_fetch_messages", "fetch_messages", "records fetched"),
        ):
            counter = CounterMetricFamily(metric, help_text, labels=["topic"])
            for topic, t in traffic:
                counter.add_metric([topic], getattr(t, attr))
            yield counter
        latency = HistogramMetricFamily("ledgerwire_request_latency_seconds",
                                        "Kafka request handling time per API", labels=["api"])
        for api, hist in sorted(snap.broker.api_latency.items()):
            _histogram(latency, [api], hist)
        yield latency
        lag = GaugeMetricFamily("ledgerwire_consumer_group_lag",
                                "log end offset minus the group's committed offset",
                                labels=["group", "topic", "partition"])
        for group, topic, partition, value in snap.group_lag:
            lag.add_metric([group, topic, str(partition)], value)
        yield lag
        yield from _partition_families(snap.partitions)
        yield from _share_families(snap.share_partitions)
        yield from _replication_families(snap.replication)
        dead = CounterMetricFamily("ledgerwire_share_dead_lettered_records",
                                   "records copied to a share group's dead-letter topic",
                                   labels=["group", "topic", "partition"])
        for (group, topic, partition), count in sorted(snap.share_dead_lettered.items()):
            dead.add_metric([group, topic, str(partition)], count)
        yield dead
        yield from _bookie_families(snap.bookies)
        yield GaugeMetricFamily("ledgerwire_under_replicated_ledgers",
                                "ledgers marked under-replicated by the auditor",
                                value=snap.under_replicated_ledgers)
        if snap.capacity is not None:
            yield GaugeMetricFamily("ledgerwire_live_bookies", "bookies registered as available",
                                    value=snap.capacity.live_bookies)
            yield GaugeMetricFamily(
                "ledgerwire_spare_bookies",
                "live bookies minus the ensemble size (<= 0: a lost bookie cannot be replaced)",
                value=snap.capacity.spare_bookies)
        ratio = GaugeMetricFamily("ledgerwire_cache_hit_ratio", "hits / (hits + misses) per cache",
                                  labels=["cache"])
        ratio.add_metric(["bookie_read"], _ratio(sum(b.read_cache_hits for b in snap.bookies),
                                                 sum(b.read_cache_misses for b in snap.bookies)))
        yield ratio
        yield GaugeMetricFamily("ledgerwire_start_time_seconds", "process start, unix seconds",
                                value=snap.started_at)


_SHARE_COUNTERS = (  # (metric name suffix, DeliveryStats field, help)
    ("acquired_records", "acquired", "records acquired by share consumers (every delivery)"),
    ("redelivered_records", "redelivered",
     "records acquired again after a release or an expired lock"),
    ("accepted_records", "accepted", "records acknowledged ACCEPT"),
    ("released_records", "released", "records acknowledged RELEASE"),
    ("rejected_records", "rejected", "records acknowledged REJECT"),
    ("lock_expiries", "lock_expiries", "acquisition locks that expired unacknowledged"),
    ("limit_archived_records", "archived_by_limit",
     "records archived after share.delivery.count.limit deliveries"),
)


def _share_families(rows: Sequence[tuple[str, str, int, Any, int]]) -> Iterator[Metric]:
    """Kafka share groups, per group and partition (counters since the state was loaded)."""
    for name, attr, help_text in _SHARE_COUNTERS:
        counter = CounterMetricFamily(f"ledgerwire_share_{name}", help_text,
                                      labels=["group", "topic", "partition"])
        for group, topic, partition, stats, _ in rows:
            counter.add_metric([group, topic, str(partition)], getattr(stats, attr))
        yield counter
    in_flight = GaugeMetricFamily("ledgerwire_share_in_flight_records",
                                  "records between a share group's start and end offsets not "
                                  "yet acknowledged or archived",
                                  labels=["group", "topic", "partition"])
    for group, topic, partition, _, count in rows:
        in_flight.add_metric([group, topic, str(partition)], count)
    yield in_flight


def _partition_families(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    for metric, key, help_text in (
        ("ledgerwire_partition_ledgers", "ledgers", "ledgers in a partition's managed ledger"),
        ("ledgerwire_partition_size_bytes", "bytes", "stored bytes of a partition"),
        ("ledgerwire_partition_log_end_offset", "log_end", "high watermark"),
        ("ledgerwire_partition_log_start_offset", "log_start", "first offset still stored"),
    ):
        gauge = GaugeMetricFamily(metric, help_text, labels=["topic", "partition"])
        for row in rows:
            gauge.add_metric([row["topic"], str(row["partition"])], row[key])
        yield gauge
    yield GaugeMetricFamily("ledgerwire_ledgers", "ledgers held by the partitions open here",
                            value=sum(r["ledgers"] for r in rows))
    yield from _offload_families([r for r in rows if r.get("offload")])
    compacted = [r for r in rows if r.get("compaction")]
    if not compacted:
        return
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
        gauge = GaugeMetricFamily(metric, help_text, labels=["topic", "partition"])
        for row in compacted:
            gauge.add_metric([row["topic"], str(row["partition"])], row["compaction"][key])
        yield gauge


def _offload_families(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    """Tiered storage per partition (only when [offload] is configured)."""
    if not rows:
        return
    for cls, metric, key, help_text in (
        (GaugeMetricFamily, "ledgerwire_offload_ledgers", "ledgers_offloaded",
         "ledgers of a partition with a verified copy in tiered storage"),
        (GaugeMetricFamily, "ledgerwire_offload_bytes", "bytes_offloaded",
         "bytes of a partition in tiered storage"),
        (GaugeMetricFamily, "ledgerwire_offload_bytes_on_bookies", "bytes_on_bookies",
         "bytes of a partition still on bookies"),
        (GaugeMetricFamily, "ledgerwire_offload_lag_seconds", "lag_seconds",
         "seconds since the oldest closed ledger that the offload policy says should be "
         "offloaded, and is not yet, was closed (0: policy met or off)"),
        (GaugeMetricFamily, "ledgerwire_offload_lag_bytes", "lag_bytes",
         "bytes of the closed ledgers the offload policy says should be offloaded and are "
         "still only on bookies"),
        (CounterMetricFamily, "ledgerwire_offload_ledgers_offloaded", "offloaded_total",
         "ledgers this broker offloaded since it started"),
        (CounterMetricFamily, "ledgerwire_offload_failures", "failures",
         "offload passes that failed (the next pass retries)"),
    ):
        family = cls(metric, help_text, labels=["topic", "partition"])
        for row in rows:
            family.add_metric([row["topic"], str(row["partition"])], row["offload"][key])
        yield family
    yield CounterMetricFamily("ledgerwire_offload_read_errors",
                              "reads of offloaded objects that failed (missing, corrupt, store "
                              "down)", value=max(r["offload"]["read_errors"] for r in rows))
    yield CounterMetricFamily("ledgerwire_offload_store_reads",
                              "range requests to the object store (block cache misses)",
                              value=max(r["offload"]["store_reads"] for r in rows))
    yield CounterMetricFamily("ledgerwire_offload_store_read_seconds",
                              "time spent in object-store range requests (latency = this / "
                              "ledgerwire_offload_store_reads_total)",
                              value=max(r["offload"]["store_read_seconds"] for r in rows))


def _bookie_families(bookies: Sequence[BookieGauges]) -> Iterator[Metric]:
    def per_bookie(cls: Any, name: str, help_text: str, value: Any) -> Metric:
        family = cls(name, help_text, labels=["bookie"])
        for b in bookies:
            family.add_metric([b.bookie_id], value(b))
        return family

    yield per_bookie(GaugeMetricFamily, "ledgerwire_bookie_disk_used_bytes",
                     "used bytes of a bookie's filesystem", lambda b: b.disk_used_bytes)
    yield per_bookie(GaugeMetricFamily, "ledgerwire_bookie_disk_total_bytes",
                     "size of a bookie's filesystem", lambda b: b.disk_total_bytes)
    yield per_bookie(GaugeMetricFamily, "ledgerwire_bookie_read_only",
                     "1 when the bookie refuses writes",
                     lambda b: 1 if b.state == "read-only" else 0)
    yield per_bookie(CounterMetricFamily, "ledgerwire_bookie_read_cache_hits",
                     "bookie read cache hits", lambda b: b.read_cache_hits)
    yield per_bookie(CounterMetricFamily, "ledgerwire_bookie_read_cache_misses",
                     "bookie read cache misses", lambda b: b.read_cache_misses)
    fsync = HistogramMetricFamily("ledgerwire_journal_fsync_seconds",
                                  "bookie journal group write + fsync time", labels=["bookie"])
    for b in bookies:
        if b.journal_fsync is not None:
            _histogram(fsync, [b.bookie_id], b.journal_fsync)
    yield fsync


def _replication_families(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    labels = ["remote", "topic", "partition"]
    backlog = GaugeMetricFamily("ledgerwire_replication_backlog_messages",
                                "offsets not yet replicated to the remote cluster", labels=labels)
    lag = GaugeMetricFamily("ledgerwire_replication_lag_seconds",
                            "age of the oldest record not yet replicated", labels=labels)
    sent = CounterMetricFamily("ledgerwire_replication_sent", "records replicated",
                               labels=labels)
    for row in rows:
        values = [row["remote"], row["topic"], str(row["partition"])]
        backlog.add_metric(values, row["backlog_messages"] or 0)
        lag.add_metric(values, row["lag_seconds"] or 0.0)
        sent.add_metric(values, row["sent_total"])
    yield from (backlog, lag, sent)


def render_metrics(snap: MetricsSnapshot, accept: str = "") -> tuple[bytes, str]:
    """(body, content type) of one snapshot: OpenMetrics when the scraper's Accept header asks
    for it, else the Prometheus text format 0.0.4 (prometheus_client's negotiation)."""
    encoder, content_type = choose_encoder(accept)
    return encoder(SnapshotCollector(snap)), content_type


def traffic_totals(broker: BrokerMetrics) -> dict[str, Any]:
    """The console's live charts: the same counters as /metrics, summed, as JSON."""
    totals = TopicTraffic()
    for t in broker.traffic.values():
        totals.produce_bytes += t.produce_bytes
        totals.produce_messages += t.produce_messages
        totals.fetch_bytes += t.fetch_bytes
        totals.fetch_messages += t.fetch_messages
    latency = {api: {"count": h.count, "sum": h.sum} for api, h in broker.api_latency.items()}
    return {"produce_bytes": totals.produce_bytes, "produce_messages": totals.produce_messages,
            "fetch_bytes": totals.fetch_bytes, "fetch_messages": totals.fetch_messages,
            "latency": latency}
