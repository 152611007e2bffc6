"""Kafka-side tools for the cluster tests, chaos script and failover benchmark: a background
idempotent producer that records what was acknowledged, and a reader of a whole topic.

Messages carry a unique id as their value ("<run>-<n>"), so "every acknowledged message
exactly once" is a count over the consumed values.  Blocking (confluent-kafka) on purpose.
LEDGERWIRE_RDKAFKA_DEBUG=eos (or any librdkafka debug contexts) makes the producer log them to
stderr (ERRSEQ and DRAIN lines show a producer-epoch bump and what caused it).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=timeout_s)
    for future in futures.values():
        try:
            future.result(timeout_s)
        except Exception as exc:  # already exists is fine
            if "exists" not in str(exc).lower():
                raise


@dataclass
class ProduceRun:
    bootstrap: str
    topic: str
    run_id: str = "r"
    rate_per_s: float = 400.0
    acked: list[str] = field(default_factory=list)
    ack_times: list[float] = field(default_factory=list)
    ack_partitions: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    error_codes: Counter[str] = field(default_factory=Counter)  # failed deliveries by code
    failed: list[str] = field(default_factory=list)  # values whose delivery failed
    sent_at: dict[str, float] = field(default_factory=dict)  # value -> produce() time
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ProduceRun:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 120000, "request.timeout.ms": 30000,
            "retry.backoff.ms": 50, "retry.backoff.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000, "metadata.max.age.ms": 3000,
            **({"debug": os.environ["LEDGERWIRE_RDKAFKA_DEBUG"]}
               if os.environ.get("LEDGERWIRE_RDKAFKA_DEBUG") else {}),
        })
        lock = threading.Lock()

        def delivered(err: KafkaError | None, msg: object) -> None:
            with lock:
                if err is None:
                    self.acked.append(msg.value().decode())  # type: ignore[attr-defined]
                    self.ack_times.append(time.monotonic())
                    self.ack_partitions.append(int(msg.partition()))  # type: ignore[attr-defined]
                else:
                    self.errors.append(str(err))
                    self.error_codes[err.name()] += 1
                    self.failed.append(msg.value().decode())  # type: ignore[attr-defined]

        interval = 1.0 / self.rate_per_s
        n = 0
        while not self._stop.is_set():
            value = f"{self.run_id}-{n}"
            try:
                producer.produce(self.topic, value.encode(), key=str(n).encode(),
                                 on_delivery=delivered)
                self.sent_at[value] = time.monotonic()
                n += 1
                self.sent = n
            except BufferError:
                pass
            producer.poll(interval)
        producer.flush(120)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(180)

    def acked_since(self, t: float) -> int:
        return sum(1 for at in self.ack_times if at >= t)

    def first_ack_after(self, t: float) -> float | None:
        return next((at for at in self.ack_times if at >= t), None)

    def longest_pause_after(self, t: float) -> float | None:
        """How long a fault at `t` stopped produce (see longest_pause_after below)."""
        return longest_pause_after(list(self.ack_times), list(self.ack_partitions), t)


def longest_pause_after(ack_times: list[float], ack_partitions: list[int],
                        t: float) -> float | None:
    """The longest time any partition went without an acknowledgement from `t` on (the
    last acknowledgement before `t` counts as the start of a pause): how long a fault at
    `t` stopped produce. None if no partition acknowledged anything after `t`."""
    last_before: dict[int, float] = {}
    after: dict[int, list[float]] = {}
    for at, partition in zip(ack_times, ack_partitions, strict=False):
        if at < t:
            last_before[partition] = at
        else:
            after.setdefault(partition, []).append(at)
    if not after:
        return None
    longest = 0.0
    for partition, times in after.items():
        previous = last_before.get(partition, t)
        for at in times:
            longest = max(longest, at - previous)
            previous = at
    return longest


def read_topic(bootstrap: str, topic: str, partitions: int,
               timeout_s: float = 60.0) -> list[tuple[int, int, str]]:
    """Every record of the topic as (partition, offset, value), read to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
    records: list[tuple[int, int, str]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error, partition = msg.error(), int(msg.partition() or 0)
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                continue
            at_end.discard(partition)
            records.append((partition, int(msg.offset() or 0), (msg.value() or b"").decode()))
    finally:
        consumer.close()
    if len(at_end) < partitions:
        raise TimeoutError(f"read only partitions {sorted(at_end)} to the end")
    return records


@dataclass
class Verdict:
    acked: int
    lost: int
    duplicated: int
    gaps: int

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.gaps == 0


def verify(acked: list[str], records: list[tuple[int, int, str]]) -> Verdict:
    """Acknowledged values missing (lost), values stored twice (duplicated), offset holes."""
    counts = Counter(value for _, _, value in records)
    lost = sum(1 for value in set(acked) if counts[value] == 0)
    duplicated = sum(1 for _, c in counts.items() if c > 1)
    gaps = 0
    by_partition: dict[int, list[int]] = {}
    for p, offset, _ in records:
        by_partition.setdefault(p, []).append(offset)
    for offsets in by_partition.values():
        offsets.sort()
        gaps += sum(1 for a, b in zip(offsets, offsets[1:], strict=False) if b != a + 1)
    return Verdict(len(set(acked)), lost, duplicated, gaps)


def read_committed(config: dict[str, Any], topic: str, expected: int, partitions: int,
                   timeout_s: float = 60.0) -> list[str]:
    """read_committed values of every partition, once `expected` values arrived and every
    partition reported its end (the last stable offset).  `config`: how to reach the cluster
    (bootstrap servers, and SASL settings on a secured one)."""
    consumer = Consumer({**config, "group.id": f"rc-{time.time()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
    values: list[str] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if len(values) >= expected and len(at_end) == partitions:
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(int(msg.partition() or 0))
                continue
            at_end.discard(int(msg.partition() or 0))
            values.append((msg.value() or b"").decode())
    finally:
        consumer.close()
    return values
