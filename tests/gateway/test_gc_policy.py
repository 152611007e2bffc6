"""A started broker process runs the cycle collector with a large young generation and its
start-up heap frozen (gateway/process/gc_policy.py; the effect on the node's CPU is measured
in benchmarks/bench_partitions.py, not here)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.process import gc_policy


@pytest.fixture
def restored_collector() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_settle_heap_freezes_start_up_and_sets_the_thresholds(
        restored_collector: None) -> None:  # noqa: ARG001
    built_at_start = [[n] for n in range(1000)]
    gc_policy.settle_heap()
    assert gc.get_threshold() == (gc_policy.YOUNG_OBJECTS, gc_policy.MIDDLE_COLLECTIONS,
                                  gc_policy.OLD_COLLECTIONS)
    assert gc_policy.YOUNG_OBJECTS >= 10 * 700  # well above CPython's default
    assert gc.get_freeze_count() >= len(built_at_start)
