"""A run of stored batches forwarded as one (gateway/replication/record_rewrite.py) stays within
the send limit after its records are rebased: a later batch's offset and timestamp deltas grow
when rebased on the run's first batch (a batch stored a minute later: each timestamp delta
takes three bytes instead of one), so a run checked against the batches' stored sizes could
leave as a batch over the remote's max.message.bytes, refused on every session's retry."""

from __future__ import annotations

from gateway.replication.batches import record_origins
from gateway.replication.record_rewrite import OutgoingBatches, frame
from protocols.kafka.record_batch import Record, build_batch, decode_records

LIMIT = 100_000
T0 = 1_700_000_000_000


def test_a_run_of_batches_stays_within_the_limit_once_rebased() -> None:
    first = build_batch([Record(0, T0, None, b"x" * 400, []) for _ in range(12)], base_offset=0)
    # tiny records a minute later, in a batch that just fits beside the first one as stored
    later = build_batch([Record(0, T0 + 70_000, None, b"0123456789", []) for _ in range(5200)],
                        base_offset=12)
    assert len(first) + len(later) < LIMIT
    out = OutgoingBatches("east", LIMIT, forward_min_bytes=0)
    out.add(first, 0)
    out.add(later, 0)
    groups = out.finish()
    assert all(len(payload) <= LIMIT for payload, *_ in groups), [len(g[0]) for g in groups]
    framed = [frame(p, n, base_ts, max_ts, 3, 0, 0) for p, n, base_ts, max_ts, _ in groups]
    got = [(r.timestamp, r.value, origin) for data in framed
           for r, origin in zip(decode_records(data), record_origins(data), strict=True)]
    assert got == [(r.timestamp, r.value, ("east", r.offset))
                   for data in (first, later) for r in decode_records(data)]
