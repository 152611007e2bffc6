"""/metrics text: parsed by prometheus_client's parser; counters follow the traffic fed in."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gateway.admin.metrics import (
    BookieGauges,
    BrokerMetrics,
    Histogram,
    MetricsSnapshot,
    count_records,
    render_metrics,
)
from tests.operations.ops_stack import batch


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_count_records_walks_every_batch() -> None:
    one, two = batch(3), batch(5)
    assert count_records(one + two) == (len(one) + len(two), 8)
    assert count_records([one, memoryview(two)]) == (len(one) + len(two), 8)
    assert count_records(b"") == (0, 0)
    assert count_records(b"\x00" * 70) == (70, 0)  # a nonsense length stops the walk


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.5, 0.7, 3.0):
        h.observe(v)
    assert h.cumulative() == [("0.1", 1), ("1", 3), ("+Inf", 4)]
    assert h.count == 4 and abs(h.sum - 4.25) < 1e-9


def test_rendered_text_parses_and_reflects_traffic() -> None:
    metrics = BrokerMetrics()
    produce_body = {"topic_data": [{"name": 'we"ird', "partition_data": [
        {"index": 0, "records": batch(4)}, {"index": 1, "records": batch(2)}]}]}
    produce_answer = {"responses": [{"name": 'we"ird', "partition_responses": [
        {"index": 0, "error_code": 0}, {"index": 1, "error_code": 6}]}]}
    metrics.observe_request("Produce", 0.003, produce_body, produce_answer)
    metrics.topic_names_by_id = lambda topic_id: "byid" if topic_id == "u1" else None
    fetch_answer = {"responses": [{"topic": None, "topic_id": "u1", "partitions": [
        {"records": [batch(3)]}]}]}
    metrics.observe_request("Fetch", 0.2, {}, fetch_answer)
    metrics.observe_request("Metadata", 7.0, {}, {"odd": True})
    fsync = Histogram()
    fsync.observe(0.002)
    snap = MetricsSnapshot(
        metrics,
        [{"topic": "t", "partition": 0, "log_start": 2, "log_end": 10, "ledgers": 3,
          "bytes": 500}],
        [("g1", "t", 0, 4)],
        [BookieGauges("b0", "read-write", 100, 1000, 3, 1, fsync)],
        under_replicated_ledgers=2,
    )
    body, content_type = render_metrics(snap)
    assert content_type.startswith("text/plain; version=0.0.4")
    got = samples(body.decode())
    weird = (("topic", 'we"ird'),)
    assert got[("ledgerwire_topic_produce_messages_total", weird)] == 4  # failed partition not
    assert got[("ledgerwire_topic_produce_bytes_total", weird)] == len(batch(4))
    assert got[("ledgerwire_topic_fetch_messages_total", (("topic", "byid"),))] == 3
    assert got[("ledgerwire_request_latency_seconds_count", (("api", "Produce"),))] == 1
    assert got[("ledgerwire_request_latency_seconds_bucket",
                (("api", "Fetch"), ("le", "0.25")))] == 1
    assert got[("ledgerwire_request_latency_seconds_bucket",
                (("api", "Metadata"), ("le", "5")))] == 0
    assert got[("ledgerwire_consumer_group_lag",
                (("group", "g1"), ("partition", "0"), ("topic", "t")))] == 4
    assert got[("ledgerwire_ledgers", ())] == 3
    assert got[("ledgerwire_bookie_disk_used_bytes", (("bookie", "b0"),))] == 100
    assert got[("ledgerwire_journal_fsync_seconds_count", (("bookie", "b0"),))] == 1
    assert got[("ledgerwire_cache_hit_ratio", (("cache", "bookie_read"),))] == 0.75
    assert got[("ledgerwire_under_replicated_ledgers", ())] == 2


def test_openmetrics_by_content_negotiation() -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

    metrics = BrokerMetrics()
    metrics.observe_request("Produce", 0.003, {"topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": batch(2)}]}]}, {"responses": []})
    snap = MetricsSnapshot(metrics, [], [], [], 0, started_at=1.5)
    body, content_type = render_metrics(
        snap, "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5")
    assert content_type.startswith("application/openmetrics-text")
    text = body.decode()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in om_parse(text)}
    produced = families["ledgerwire_topic_produce_messages"]
    assert produced.type == "counter" and produced.samples[0].value == 2
    assert families["ledgerwire_start_time_seconds"].samples[0].value == 1.5
    plain, plain_type = render_metrics(snap, "")
    assert plain_type.startswith("text/plain; version=0.0.4") and b"# EOF" not in plain


def test_share_group_counters() -> None:
    from gateway.delivery.delivery_state import DeliveryStats

    stats = DeliveryStats(acquired=7, redelivered=2, accepted=4, released=1, rejected=1,
                          lock_expiries=1, archived_by_limit=1)
    snap = MetricsSnapshot(BrokerMetrics(), [], [], [], 0,
                           share_partitions=[("g", "orders", 0, stats, 2)],
                           share_dead_lettered={("g", "orders", 0): 3})
    body, _ = render_metrics(snap)
    got = samples(body.decode())
    labels = (("group", "g"), ("partition", "0"), ("topic", "orders"))
    assert got[("ledgerwire_share_acquired_records_total", labels)] == 7
    assert got[("ledgerwire_share_redelivered_records_total", labels)] == 2
    assert got[("ledgerwire_share_lock_expiries_total", labels)] == 1
    assert got[("ledgerwire_share_limit_archived_records_total", labels)] == 1
    assert got[("ledgerwire_share_in_flight_records", labels)] == 2
    assert got[("ledgerwire_share_dead_lettered_records_total", labels)] == 3
