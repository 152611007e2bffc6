"""The cycle collector's settings for a long-running broker process (issue 16).

CPython collects its young generation every 700 net new container objects and promotes what
survives; what is still alive at the middle generation's collection (every 10 young ones) goes
to the old generation, and a full collection, which walks every tracked object of the process,
runs once the objects promoted since the last one exceed a quarter of those it kept.

A broker keeps many requests in flight, each waiting milliseconds on a metadata write or a
journal fsync, and a partition's first write builds a log of ~70 objects.  With 700, the young
and middle collections come so often that those in-flight objects are alive at them and are
promoted by the thousand although they die soon after: full collections came every few seconds,
and each walks a heap that grows with the partitions and ledgers the node holds.  Measured with
the collector's callbacks, 40,000 first writes at max_open_partitions 5,000: full collections
took 25-31 s of the node's CPU (~40%; 0.3-0.5 s each, growing with the heap), which is why the
cost of a first write grew with the partition count.  With a young generation of 20,000 the
same run spent 5 s in the collector in all, with 2 full collections.

So once a process is up: what start-up built is collected once and frozen (never walked again),
and the young generation is YOUNG_OBJECTS.  A young collection then walks at most that many
objects (a few ms) and the middle one at most MIDDLE_COLLECTIONS times that; full collections
come only when the heap really grew by a quarter.  Memory is not held longer in a way that
matters: objects without cycles are freed by reference counting whatever the thresholds (and
closed partition logs have no cycles: tests/partition_log/test_closed_log_released.py), and
cyclic garbage waits for at most YOUNG_OBJECTS more allocations.

Figures (benchmarks/bench_partitions.py --write-all-once, node CPU per first write, one quiet
window 05:16-05:19 UTC, load 0.2-2.4, cf5436e before vs after this and the cycle fix 93e8d06):
8,000 partitions (max_open 2,000): 0.73 -> 0.51 ms and 0.84 -> 0.62 ms (0.70x, 0.74x);
100,000 created (max_open 5,000, 60 s of first writes): 1.30 ms (42,000 written) -> 1.07 ms
(46,000 written), 0.82x.  The node's RSS after the 8,000 first writes was 20-28 MB higher.
"""

from __future__ import annotations

import gc

YOUNG_OBJECTS = 20_000  # CPython's default: 700
MIDDLE_COLLECTIONS = 5  # young collections per middle one (default 10): bounds its pause
OLD_COLLECTIONS = 10  # middle collections before a full one is considered (default 10)


def settle_heap() -> None:
    """Call once the process has started (before it serves): collect and freeze what start-up
    built, and set the thresholds above."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, MIDDLE_COLLECTIONS, OLD_COLLECTIONS)
