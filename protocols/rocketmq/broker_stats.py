"""Put/get counters and rates for GET_BROKER_RUNTIME_INFO, derived from samples of totals.

ledgerwire has no per-message counters on the RocketMQ path; the totals are what the storage
says: messages put = the sum of the end offsets of the queues this broker has open (Kafka and
RocketMQ writes alike, one offset space), messages got = the sum of committed consumer-group
offsets.  Each runtime-info request records a sample; rates ("putTps", "getTransferedTps", as
Java prints them: "<10 s> <60 s> <600 s>" with two decimals) come from the oldest sample inside
each window, and the "...Morning" totals from the first sample of each local day (until a day
has been seen they equal the first sample, so today's counts start at zero like a fresh Java
broker's).  mqadmin clusterList polls, so its rates fill in from the second poll on.

This module must never do I/O (the caller passes totals and time).
"""

from __future__ import annotations

import datetime
from collections import deque
from dataclasses import dataclass

WINDOWS_S = (10.0, 60.0, 600.0)
MAX_SAMPLE_AGE_S = 660.0


@dataclass(frozen=True)
class Sample:
    at_s: float
    puts: int
    gets: int


class BrokerStats:
    def __init__(self) -> None:
        self._samples: deque[Sample] = deque()
        self._day: datetime.date | None = None
        self._today_morning: Sample | None = None
        self._yesterday_morning: Sample | None = None
        self._group_samples: dict[str, deque[tuple[float, int]]] = {}

    def record(self, at_s: float, puts: int, gets: int) -> None:
        sample = Sample(at_s, puts, gets)
        day = datetime.datetime.fromtimestamp(at_s).date()
        if self._day is None:
            self._today_morning = self._yesterday_morning = sample
        elif day != self._day:
            self._yesterday_morning = (self._today_morning if day - self._day
                                       == datetime.timedelta(days=1) else sample)
            self._today_morning = sample
        self._day = day
        self._samples.append(sample)
        while self._samples and at_s - self._samples[0].at_s > MAX_SAMPLE_AGE_S:
            self._samples.popleft()

    def group_tps(self, group: str, at_s: float, consumed_total: int) -> float:
        """The group's consumption rate (committed offsets per second) over the last minute,
        recording `consumed_total` (the sum of its committed offsets) as a sample."""
        samples = self._group_samples.setdefault(group, deque())
        samples.append((at_s, consumed_total))
        while samples and at_s - samples[0][0] > WINDOWS_S[1]:
            samples.popleft()
        first_at, first_total = samples[0]
        if at_s <= first_at:
            return 0.0
        return max(0, consumed_total - first_total) / (at_s - first_at)

    def _rate(self, window_s: float, field: str) -> float:
        if not self._samples:
            return 0.0
        newest = self._samples[-1]
        oldest = newest
        for sample in self._samples:
            if newest.at_s - sample.at_s <= window_s:
                oldest = sample
                break
        elapsed = newest.at_s - oldest.at_s
        if elapsed <= 0:
            return 0.0
        return max(0, getattr(newest, field) - getattr(oldest, field)) / elapsed

    def tps(self, field: str) -> str:
        """"puts" or "gets" as Java formats a StatsSnapshot triple."""
        return " ".join(f"{self._rate(w, field):.2f}" for w in WINDOWS_S)

    def table(self) -> dict[str, str]:
        newest = self._samples[-1] if self._samples else Sample(0.0, 0, 0)
        today = self._today_morning or newest
        yesterday = self._yesterday_morning or newest
        return {
            "msgPutTotalYesterdayMorning": str(yesterday.puts),
            "msgPutTotalTodayMorning": str(today.puts),
            "msgPutTotalTodayNow": str(newest.puts),
            "msgGetTotalYesterdayMorning": str(yesterday.gets),
            "msgGetTotalTodayMorning": str(today.gets),
            "msgGetTotalTodayNow": str(newest.gets),
            "putTps": self.tps("puts"),
            "getTransferedTps": self.tps("gets"),
            "getFoundTps": self.tps("gets"),
        }
