"""The Spark planner over a compacted partition: offsets have gaps inside and between ledgers,
and a range bound in a gap must still cover every surviving record (no Spark needed)."""

from __future__ import annotations

from spark_bridge.topic_layout import LedgerSpan, PartitionLayout, spans_covering


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
