"""The Spark planner over a compacted partition: offsets have gaps inside and between ledgers,
and a range bound in a gap must still cover every surviving record; the entry search within a
ledger (no Spark needed)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.kafka.record_batch import build_batch, parse_header
from spark_bridge.topic_layout import LedgerSpan, PartitionLayout, entry_for_offset, spans_covering


def layout(*spans: tuple[int, int]) -> PartitionLayout:
    return PartitionLayout("t", 0, 0, spans[-1][1], tuple(
        LedgerSpan(10 + i, 3, first, end, True) for i, (first, end) in enumerate(spans)))


def test_bounds_in_gaps_take_the_neighbouring_spans() -> None:
    compacted = layout((0, 40), (55, 90), (120, 130))  # 40..54 and 90..119 compacted away
    assert spans_covering(compacted, 0, 130) == (0, 2)
    assert spans_covering(compacted, 45, 100) == (1, 1)  # both bounds in gaps
    assert spans_covering(compacted, 45, 125) == (1, 2)
    assert spans_covering(compacted, 92, 110) is None  # nothing survives in [92, 110)
    assert spans_covering(compacted, 130, 140) is None


def test_dense_logs_plan_as_before() -> None:
    dense = layout((0, 10), (10, 20), (20, 30))
    assert spans_covering(dense, 5, 15) == (0, 1)
    assert spans_covering(dense, 10, 20) == (1, 1)
    assert spans_covering(dense, 0, 30) == (0, 2)


class _Entries:
    """The slice of LedgerAccess that entry_for_offset reads, counting its reads."""

    def __init__(self, batches: list[bytes]) -> None:
        self.batches = batches
        self.reads = 0

    def read(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        self.reads += 1
        return self.batches[first:last + 1]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 3)), min_size=1, max_size=12),
       base=st.integers(0, 1000))
def test_entry_search_matches_a_scan(sizes: list[tuple[int, int]], base: int) -> None:
    """entry_for_offset = the last entry whose base is <= offset (entry 0 when none), for
    every offset around a ledger whose batches have gaps between them (compaction); the
    span's own bounds (a whole-log range) need no read."""
    batches, bases, at = [], [], base
    for count, gap in sizes:
        batches.append(build_batch([(b"k", b"v")] * count, base_offset=at, timestamp_ms=1))
        bases.append(at)
        at += count + gap
    last = parse_header(batches[-1])
    span = LedgerSpan(7, len(batches) - 1, bases[0], last.base_offset + last.last_offset_delta + 1,
                      True)  # fmt: skip
    for offset in range(base - 3, span.end_offset + 3):
        access = _Entries(batches)
        expected = max([i for i, b in enumerate(bases) if b <= offset], default=0)
        assert entry_for_offset(access, span, offset) == expected  # type: ignore[arg-type]
        if offset <= span.first_offset or offset >= span.end_offset - 1:
            assert access.reads == 0
