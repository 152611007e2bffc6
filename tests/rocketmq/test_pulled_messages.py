"""The one-pass pull encoding (protocols/rocketmq/pulled_messages.py) gives the same bytes as the
general path (decode_records, from_record, stored_message, encode_stored_message) for every
record it accepts, accepts every batch a RocketMQ send stores, and never raises."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Literal

from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.kafka import compression as codecs
from protocols.kafka.record_batch import Record, build_batch, decode_records
from protocols.rocketmq.handlers.common import stored_message
from protocols.rocketmq.message_encoding import (
    MessageMeta,
    encode_stored_message,
    ipv4,
    to_record,
)
from protocols.rocketmq.pulled_messages import PullEncoding
from protocols.rocketmq.subscription import parse_tag_expression
from protocols.rocketmq.topic_names import from_storage

BROKER: Any = SimpleNamespace(config=SimpleNamespace(advertised_host="10.1.2.3",
                                                     advertised_port=10911))
TOPIC = "orders.eu"  # stored name of the RocketMQ topic orders%eu
QUEUE = 3

SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # not encodable as UTF-8
prop_text = st.text(st.characters(blacklist_categories=SURROGATES,
                                  blacklist_characters="\x01\x02"), max_size=12)
props = st.dictionaries(prop_text.filter(bool), prop_text, max_size=5)
metas = st.builds(MessageMeta, flag=st.integers(-(2**31), 2**31 - 1),
                  sys_flag=st.integers(0, 2**31 - 1),
                  born_host=st.tuples(st.sampled_from(["127.0.0.1", "192.168.7.9"]),
                                      st.integers(0, 65535)),
                  store_timestamp=st.integers(0, 2**41), reconsume_times=st.integers(0, 16))
# bodies and records of every varint width the one pass reads inline or leaves to read_varint
bodies = st.one_of(st.binary(max_size=300),
                   st.sampled_from([63, 64, 8000, 8191, 8192, 20000]).map(bytes))
messages = st.lists(st.tuples(bodies, props, metas,
                              st.integers(1, 2**41)), min_size=1, max_size=4)
filters = st.sampled_from(["*", "A", "A || B", "Bench"])


def general(batch: bytes, first: int, expression: str) -> list[tuple[int, bytes | None]]:
    tag_filter = parse_tag_expression(expression, "TAG")
    out: list[tuple[int, bytes | None]] = []
    for record in decode_records(batch):
        if record.offset < first:
            continue
        tags = next((v for k, v in record.headers if k == "TAGS"), None)
        if not tag_filter.matches(tags.decode("utf-8", "replace") if tags is not None else None):
            out.append((record.offset, None))
            continue
        out.append((record.offset, encode_stored_message(
            stored_message(BROKER, TOPIC, QUEUE, record))))
    return out


def fast(batch: bytes, first: int, expression: str) -> list[tuple[int, bytes | None]] | None:
    encoding = PullEncoding(from_storage(TOPIC), QUEUE, ipv4("10.1.2.3"), 10911,
                            parse_tag_expression(expression, "TAG").matcher)
    encoded = encoding.encode_batch(batch, first)
    if encoded is None:
        return None
    for _offset, item in encoded:
        assert item is None or item[1] == len(item[0])
    return [(offset, item[0] if item is not None else None) for offset, item in encoded]


@settings(max_examples=60, deadline=None)
@given(messages, st.integers(0, 1000), st.integers(0, 4), filters, st.booleans())
def test_rocketmq_written_batches_take_the_one_pass_path(
        items: list[tuple[bytes, dict[str, str], MessageMeta, int]], base: int, skip: int,
        expression: str, tagged: bool) -> None:  # fmt: skip
    records = []
    for body, p, meta, born in items:
        if tagged:
            p = {**p, "TAGS": "A"}
        records.append(to_record(body, p, meta, born))
    batch = build_batch(records, base_offset=base)
    got = fast(batch, base + skip, expression)
    assert got is not None
    assert got == general(batch, base + skip, expression)


# mostly plain headers (so that many batches take the one-pass path), sometimes what it must
# leave to the general path: separators, empty or repeated names, bad UTF-8, a stray __rmq
header_names = st.one_of(st.text("abTAGSKEY", min_size=1, max_size=4),
                         st.sampled_from(["TAGS", "KEYS", "__rmq", "a\x01b", ""]))
header_values = st.one_of(st.text("xyzA\u00e9\u4e2d", max_size=6).map(str.encode), st.none(),
                          st.sampled_from([b"\xff\xfe", b"x\x02y", b"\x01" * 29]))
kafka_records = st.lists(st.tuples(st.sampled_from([None, None, None, b"k"]),
                                   st.one_of(st.none(), st.binary(max_size=40)),
                                   st.lists(st.tuples(header_names, header_values), max_size=3,
                                            unique_by=lambda h: h[0])),
                         min_size=1, max_size=3)


@settings(max_examples=80, deadline=None)
@given(kafka_records, st.sampled_from([True, True, True, False]),
       st.sampled_from([False, False, False, True]), filters, st.booleans())
def test_any_batch_is_the_same_or_left_to_the_general_path(
        recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
        with_meta: bool, compressed: bool, expression: str, log_append: bool) -> None:  # fmt: skip
    meta_value = to_record(b"", {}, MessageMeta(born_host=("10.0.0.1", 7)), 0).headers[-1][1]
    records = [Record(0, 1_700_000_000_000 + i, key, value,
                      [*headers, ("__rmq", meta_value)] if with_meta else headers)
               for i, (key, value, headers) in enumerate(recs)]
    batch = build_batch(records, compression=codecs.GZIP if compressed else codecs.NONE,
                        log_append_time_ms=1_800_000_000_000 if log_append else None)
    got = fast(batch, 0, expression)
    if got is not None:
        assert got == general(batch, 0, expression)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 200))
def test_damaged_batches_never_raise(noise: bytes, cut: int) -> None:
    batch = build_batch([to_record(b"body", {"TAGS": "A", "KEYS": "k"}, MessageMeta(), 5)])
    for damaged in (batch[:cut], batch[:61] + noise, batch[:cut] + noise + batch[cut:]):
        fast(damaged, 0, "*")  # None or messages, never an exception


def test_repeated_names_and_keys_outside_the_properties_are_left_to_the_general_path() -> None:
    meta_value = to_record(b"", {}, MessageMeta(), 0).headers[-1][1]
    twice = Record(0, 5, None, b"v", [("TAGS", b"A"), ("TAGS", b"B"), ("__rmq", meta_value)])
    keyed = Record(0, 5, b"k", b"v", [("TAGS", b"A"), ("__rmq", meta_value)])
    for record in (twice, keyed):
        assert fast(build_batch([record]), 0, "*") is None
