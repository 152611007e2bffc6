"""kafka-python consumers read by condition, not by its iterator's consumer_timeout_ms.

That timeout starts before the consumer has connected (and, with a group, joined): on a loaded
machine a short one ends the iteration before the first fetch, and the test sees nothing."""

from __future__ import annotations

import time
from typing import Any


def poll_records(consumer: Any, count: int, *, timeout_s: float = 60.0,
                 quiet_s: float = 2.0) -> list[Any]:
    """Records polled until `count` have come (or `timeout_s` passed), then for `quiet_s`
    more, so that a record beyond the expected ones is still seen."""
    out: list[Any] = []

    def poll_until(deadline: float, enough: int | None) -> None:
        while time.monotonic() < deadline and (enough is None or len(out) < enough):
            batches = consumer.poll(timeout_ms=200)
            for records in batches.values():
                out.extend(records)

    poll_until(time.monotonic() + timeout_s, count)
    poll_until(time.monotonic() + quiet_s, None)
    return out
