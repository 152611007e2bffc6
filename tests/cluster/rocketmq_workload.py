"""A RocketMQ producer workload for cluster fault tests and benchmarks/chaos.py: the official C++
client (rocketmq-client-python) sending synchronously at a steady rate, remembering what was
acknowledged, when, and what failed (by the client's error text)."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from rocketmq.client import Message, Producer, SendStatus


def error_kind(exc: Exception) -> str:
    """A short class of a C++ client failure ("connect failed", "code 2", "timeout", ...)."""
    text = str(exc)
    code = re.search(r"(?:code|errorCode|response code)\D{0,3}(-?\d+)", text, re.IGNORECASE)
    if code:
        return f"code {code.group(1)}"
    lowered = text.lower()
    for kind in ("timeout", "connect", "no route", "not served"):
        if kind in lowered:
            return kind
    return type(exc).__name__


@dataclass
class RocketMQSendRun:
    """send_sync in a thread (each send is the client's own up-to-3 attempts).  Failures
    before the first acknowledgement are counted apart (`warmup_failures`): a new topic has no
    route until every name server has seen it."""

    name_servers: str  # "h:p;h:p"
    topic: str
    run_id: str = "r"
    rate_per_s: float = 200.0
    # per attempt; the C++ client's default is 3 s.  A synchronous send in flight to a broker
    # that dies waits all of it (the client does not fail it when the connection drops)
    timeout_ms: int = 10_000
    acked: list[str] = field(default_factory=list)
    ack_times: dict[str, float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    error_kinds: Counter[str] = field(default_factory=Counter)
    failure_times: list[float] = field(default_factory=list)
    warmup_failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> RocketMQSendRun:
        self._producer = Producer(f"PG_{self.run_id}", timeout=self.timeout_ms)
        self._producer.set_namesrv_addr(self.name_servers)
        self._producer.start()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        i = 0
        interval = 1.0 / self.rate_per_s
        next_at = time.monotonic()
        while not self._stop.is_set():
            value = f"{self.run_id}-rmq-{i}"
            i += 1
            m = Message(self.topic)
            m.set_body(value.encode())
            m.set_keys(value)
            try:
                result = self._producer.send_sync(m)
                if result.status == SendStatus.OK:
                    self.acked.append(value)
                    self.ack_times[value] = time.monotonic()
                else:
                    self._failed(value, f"status {result.status}")
            except Exception as exc:  # counted by kind: the chaos report shows them
                self._failed(value, error_kind(exc))
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    def _failed(self, value: str, kind: str) -> None:
        if not self.acked:
            self.warmup_failures += 1
            return
        self.failed.append(value)
        self.error_kinds[kind] += 1
        self.failure_times.append(time.monotonic())

    def acked_since(self, t: float) -> int:
        # a copy (one C call, under the GIL): the sending thread adds to the dict meanwhile,
        # and iterating it directly ended a 30-trial chaos run ("dictionary changed size")
        return sum(1 for at in self.ack_times.copy().values() if at >= t)

    def longest_pause_after(self, t: float, partition_of: dict[str, int]) -> float | None:
        """The longest time any queue (partition, from the stored records) went without an
        acknowledged send from `t` on; None if nothing was acknowledged after `t`."""
        times: dict[int, list[float]] = {}
        for value, at in self.ack_times.copy().items():
            if value in partition_of:
                times.setdefault(partition_of[value], []).append(at)
        longest, any_after = 0.0, False
        for series in times.values():
            series.sort()
            before = [x for x in series if x < t]
            after = [x for x in series if x >= t]
            if not after:
                continue
            any_after = True
            previous = before[-1] if before else t
            for at in after:
                longest = max(longest, at - previous)
                previous = at
        return longest if any_after else None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        self._producer.shutdown()
