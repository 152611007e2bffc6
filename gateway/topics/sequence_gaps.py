"""Idempotent produce: a batch ahead of its producer's sequence briefly waits for earlier ones.

An idempotent client pipelines up to 5 batches per partition and treats
OUT_OF_ORDER_SEQUENCE_NUMBER on the oldest batch it has not seen acknowledged as fatal.  If a
later batch were judged before an earlier one that is already in this broker (two requests
racing to the partition), the client would see the earlier one acknowledged and then the later
one refused: a fatal error for a batch that was in order all along.  Batches pipelined on one
connection are judged in arrival order (tests/kafka_server/test_idempotent_pipelining.py), but
they do wait here when an earlier one was refused before it was stored (a partition hand-off:
the new owner not ready yet) and will be sent again.  A batch still ahead after the wait is
refused by the partition log with NOT_ENOUGH_REPLICAS (retriable, not stored), never
OUT_OF_ORDER_SEQUENCE_NUMBER: librdkafka answers that one by bumping its producer epoch and
sending everything unacknowledged again under new sequences, so a batch that was stored but
answered with an error (the old owner's ownership ended during its append) would be stored twice
(tests/kafka_server/test_idempotent_retry_gap.py).  A client that dropped the earlier batch for
good renumbers the later ones itself (librdkafka bumps the epoch on the permanent failure, the
Java producer adjusts its in-flight sequences).

This module must never decide a batch's fate: producer_state.py judges, partition_log.py refuses.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from gateway.topics.producer_state import ProducerStateManager
from protocols.kafka.record_batch import BatchHeader


class SequenceGaps:
    """The batches of one partition log waiting for their producers' earlier batches."""

    def __init__(self) -> None:
        self._moved = trio.Event()  # set when a producer's state may have advanced
        self.waiting = 0

    def wake(self) -> None:
        """A producer's state may have advanced (or the log failed or is closing): look again."""
        event, self._moved = self._moved, trio.Event()
        event.set()

    async def wait(self, producers: ProducerStateManager, header: BatchHeader, timeout_s: float,
                   check_usable: Callable[[], None]) -> None:
        """Wait at most `timeout_s` while the batch of `header` is ahead of its producer's last
        sequence; `check_usable` raises when the log can take no more work."""
        self.waiting += 1
        try:
            with trio.move_on_after(timeout_s):
                while producers.awaits_earlier_batches(header):
                    await self._moved.wait()
                    check_usable()
        finally:
            self.waiting -= 1
        check_usable()
