"""Kafka compaction rules on record batches (protocols/kafka/batch_compaction.py), with a model.

The model: over a log of batches (keyed, keyless, tombstones, transactions committed, aborted
or undecided, any codec), the survivors are exactly the latest committed-or-plain record of
each key (tombstones only while not expired), every record of an undecided transaction, and
nothing else; offsets and bytes of survivors never change; batch boundaries stay.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.kafka import compression as codecs
from protocols.kafka.batch_compaction import CompactionPlan, batch_keys
from protocols.kafka.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    build_control_batch,
    compute_crc,
    decode_records,
    parse_header,
)


@dataclass
class Txn:
    producer_id: int
    outcome: str  # "commit", "abort", "open"


def make_log(spec: list[tuple[int, list[tuple[int | None, int | None]], int]]
             ) -> tuple[list[bytes], dict[int, str]]:
    """Batches from (kind, [(key, value)], codec); kind 0 = plain, 1/2/3 = a transactional
    batch of producer 7/8/9 whose transaction is committed/aborted/left open."""
    batches: list[bytes] = []
    outcome_of = {7: "commit", 8: "abort", 9: "open"}
    offset = 0
    txn_of_offset: dict[int, str] = {}
    open_producers: set[int] = set()
    for kind, pairs, codec in spec:
        records = [Record(0, 1000 + i, None if k is None else b"k%d" % k,
                          None if v is None else b"v%d" % v)
                   for i, (k, v) in enumerate(pairs)]
        if kind == 0:
            batch = build_batch(records, base_offset=offset, compression=codec)
        else:
            pid = 6 + kind
            batch = build_batch(records, base_offset=offset, compression=codec, producer_id=pid,
                                producer_epoch=1, base_sequence=offset, is_transactional=True)
            open_producers.add(pid)
            for i in range(len(records)):
                txn_of_offset[offset + i] = outcome_of[pid]
        batches.append(batch)
        offset += len(records)
    for pid in sorted(open_producers):
        if outcome_of[pid] == "open":
            continue
        control = CONTROL_COMMIT if outcome_of[pid] == "commit" else CONTROL_ABORT
        batches.append(build_control_batch(control, producer_id=pid, producer_epoch=1,
                                           base_offset=offset))
        offset += 1
    return batches, txn_of_offset


def expected(batches: list[bytes], txn_of: dict[int, str], expired: bool
             ) -> set[tuple[int, bytes | None, bytes | None]]:
    latest: dict[bytes, int] = {}
    records = []
    for batch in batches:
        if parse_header(batch).is_control:
            continue
        for r in decode_records(batch):
            records.append(r)
            if r.key is not None and txn_of.get(r.offset) in (None, "commit"):
                latest[r.key] = r.offset
    out = set()
    for r in records:
        state = txn_of.get(r.offset)
        if state == "open":
            out.add((r.offset, r.key, r.value))
        elif state == "abort" or r.key is None:
            continue
        elif latest.get(r.key) == r.offset and not (r.value is None and expired):
            out.add((r.offset, r.key, r.value))
    return out


pairs = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 4)),
                           st.one_of(st.none(), st.integers(0, 50))), min_size=1, max_size=6)
specs = st.lists(st.tuples(st.sampled_from([0, 0, 0, 1, 2, 3]), pairs,
                           st.sampled_from([codecs.NONE, codecs.GZIP, codecs.LZ4, codecs.ZSTD,
                                            codecs.SNAPPY])), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(spec=specs, expired=st.booleans())
def test_survivors_match_the_model(spec: list, expired: bool) -> None:  # type: ignore[type-arg]
    batches, txn_of = make_log(spec)
    plan = CompactionPlan()
    for batch in batches:
        plan.observe(batch)
    outputs = [plan.filter(batch, expired=expired) for batch in batches]
    got = set()
    previous_last = -1
    for original, out in zip(batches, outputs, strict=True):
        if out is None:
            continue
        header, before = parse_header(out), parse_header(original)
        assert compute_crc(out) == header.crc
        assert (header.base_offset, header.last_offset) == (before.base_offset, before.last_offset)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
            before.producer_id, before.producer_epoch, before.base_sequence)
        assert header.attributes & ~0x07 == before.attributes & ~0x07
        assert header.base_offset > previous_last
        previous_last = header.last_offset
        if out is original:
            continue
        if header.is_control:
            continue
        for r in decode_records(out):
            assert before.base_offset <= r.offset <= before.last_offset
            got.add((r.offset, r.key, r.value))
    for original, out in zip(batches, outputs, strict=True):
        if out is original and not parse_header(out).is_control:
            got.update((r.offset, r.key, r.value) for r in decode_records(out))
    assert got == expected(batches, txn_of, expired)
    stats = plan.stats
    assert stats.records_out <= stats.records_in and stats.bytes_out <= stats.bytes_in + 64 * len(
        batches)


def test_a_producers_last_batch_stays_empty_and_markers_go_when_expired() -> None:
    first = build_batch([(b"a", b"1")], base_offset=0, producer_id=5, producer_epoch=2,
                        base_sequence=0)
    second = build_batch([(b"a", b"2")], base_offset=1)
    third = build_batch([(b"b", b"x")], base_offset=2, producer_id=6, producer_epoch=0,
                        base_sequence=0, is_transactional=True)
    abort = build_control_batch(CONTROL_ABORT, producer_id=6, producer_epoch=0, base_offset=3)
    fourth = build_batch([(b"c", b"y")], base_offset=4, producer_id=6, producer_epoch=0,
                         base_sequence=1)
    plan = CompactionPlan()
    log = [first, second, third, abort, fourth]
    for batch in log:
        plan.observe(batch)
    out = [plan.filter(batch, expired=True) for batch in log]
    assert out[0] is not None
    empty = parse_header(out[0])  # producer 5's only batch: kept, empty, same sequence
    assert (empty.records_count, empty.base_offset, empty.last_offset_delta,
            empty.base_sequence, empty.producer_id) == (0, 0, 0, 0, 5)
    assert out[1] is second
    assert out[2] is None  # aborted data goes (not producer 6's last batch)
    assert out[3] is None  # the marker goes too: expired and no data of its txn left
    assert out[4] is fourth
    assert plan.stats.aborted_removed == 1 and plan.stats.markers_removed == 1
    assert batch_keys(second) == [b"a"]


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=200), count=st.integers(0, 20),
       codec=st.sampled_from([codecs.NONE, codecs.GZIP]))
def test_garbage_records_in_a_valid_batch_are_a_protocol_error(payload: bytes, count: int,
                                                               codec: int) -> None:
    """A client can send any record bytes under a correct CRC: the keyless check on produce
    (and the compactor) must answer CorruptMessageError, never crash."""
    import struct

    from protocols.kafka.batch_compaction import keyless_record_indexes
    from protocols.kafka.errors import KafkaProtocolError
    from protocols.kafka.record_batch import HEADER, HEADER_SIZE, LOG_OVERHEAD

    body = codecs.compress(codec, payload)
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(out, 0, 0, HEADER_SIZE - LOG_OVERHEAD + len(body), -1, 2, 0, codec,
                     max(0, count - 1), 0, 0, -1, -1, -1, count)
    out += body
    struct.pack_into(">I", out, 17, compute_crc(out))
    batch = bytes(out)
    try:
        keyless_record_indexes(parse_header(batch), batch)
    except KafkaProtocolError:
        pass
    plan = CompactionPlan()
    try:
        plan.observe(batch)
        plan.filter(batch, expired=True)
    except KafkaProtocolError:
        pass


@settings(max_examples=100, deadline=None)
@given(first=specs, second=specs, expired=st.booleans())
def test_a_second_pass_mapping_only_dirty_batches_equals_one_pass_over_all(
        first: list, second: list, expired: bool) -> None:  # type: ignore[type-arg]
    """Pass 1 of a later pass skips the records of batches an earlier pass compacted (their
    keys are unique there): the survivors are those of compacting everything at once."""
    old, _ = make_log(first)
    plan = CompactionPlan()
    for batch in old:
        plan.observe(batch)
    clean = [out for out in (plan.filter(b, expired=False) for b in old) if out is not None]
    start = max(parse_header(b).last_offset for b in old) + 1
    new, _ = make_log(second)
    dirty = []
    for batch in new:  # the second log continues at the offsets after the first
        buf = bytearray(batch)
        struct.pack_into(">q", buf, 0, parse_header(batch).base_offset + start)
        dirty.append(bytes(buf))
    # the model: both original logs as one (producer ids 7..9 are shared between them)
    whole_first, txn_first = make_log(first)
    _, txn_second = make_log(second)
    txn_of = {**txn_first, **{o + start: s for o, s in txn_second.items()}}
    second_pass = CompactionPlan()
    for batch in clean:
        second_pass.observe(batch, clean=True)
    for batch in dirty:
        second_pass.observe(batch)
    got: set[tuple[int, bytes | None, bytes | None]] = set()
    for batch in [*clean, *dirty]:
        out = second_pass.filter(batch, expired=expired)
        if out is not None and not parse_header(out).is_control:
            got.update((r.offset, r.key, r.value) for r in decode_records(out))
    assert got == expected([*whole_first, *dirty], txn_of, expired)
