"""The sans-IO parts of geo-replication: what crosses, and how group offsets translate."""

from __future__ import annotations

from gateway.replication.batches import (
    committed_slice,
    encode_batch,
    last_origin_offset,
    outgoing_batches,
)
from gateway.replication.checkpoints import Checkpoint
from gateway.replication.offset_translation import translate
from protocols.kafka.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
)


def _batch(base: int, values: list[bytes], **kw: object) -> bytes:
    return build_batch([Record(0, 1000 + i, b"k", v, [("h", b"1")])
                        for i, v in enumerate(values)], base_offset=base, **kw)  # type: ignore[arg-type]


def test_aborted_and_control_and_replicated_in_records_stay_home() -> None:
    origin = [("lw.origin", b"west"), ("lw.origin.offset", (7).to_bytes(8, "big"))]
    foreign = build_batch([Record(0, 5, None, b"from-west", origin)], base_offset=7)
    batches = [
        _batch(0, [b"a", b"b"]),
        _batch(2, [b"t1", b"t2"], producer_id=9, producer_epoch=0, base_sequence=0,
               is_transactional=True),
        build_control_batch(CONTROL_ABORT, producer_id=9, producer_epoch=0, base_offset=4),
        _batch(5, [b"u1"], producer_id=10, producer_epoch=0, base_sequence=0,
               is_transactional=True),
        build_control_batch(CONTROL_COMMIT, producer_id=10, producer_epoch=0,
                            base_offset=6),
        foreign,
        _batch(8, [b"c"]),
        _batch(9, [b"beyond-stable"]),
    ]
    read = committed_slice(batches, 1, 9, [(9, 2)])
    assert [r.value for r in read.records] == [b"b", b"u1", b"c"]
    assert read.inbound == [(7, "west", 7)]
    assert read.next_offset == 9


def test_outgoing_batches_keep_everything_and_mark_the_origin() -> None:
    records = decode_records(_batch(40, [b"x" * 100 for _ in range(30)]))
    groups = list(outgoing_batches(records, "east", max_bytes=1000))
    assert len(groups) > 1 and sum(len(g) for g in groups) == 30
    blob = b"".join(encode_batch(g, 5, 0, 0) for g in groups)
    assert last_origin_offset(blob, "east") == (len(groups[-1]) - 1, 69)
    assert last_origin_offset(blob, "west") is None
    out = decode_records(encode_batch(groups[0], 5, 0, 0))
    assert out[0].headers[0] == ("h", b"1") and out[0].timestamp == 1000
    assert out[0].headers[1:] == [("lw.origin", b"east"),
                                  ("lw.origin.offset", (40).to_bytes(8, "big"))]


def test_translation_takes_the_lower_bound_of_both_directions() -> None:
    cp = Checkpoint(syncs=[(10, 4), (20, 15), (30, 27)])
    assert translate(cp, 5) == 0  # before the first sync: the remote's start
    assert translate(cp, 25) == 15
    cp.inbound = [(12, 3), (28, 9)]
    assert translate(cp, 25) == 3  # the remote's own records after 3 may be unread
    assert translate(cp, 35) == 9
    assert translate(cp, 11) == 0
