"""Helpers for the Spark bridge tests: a standalone with small ledgers, produced history."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.standalone import Standalone

BASE_TS = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

Row = tuple[bytes | None, bytes, int, list[tuple[str, bytes]]]  # key, value, ts, headers


@dataclass
class ProducedTopic:
    topic: str
    partitions: int
    rows: dict[tuple[int, int], Row] = field(default_factory=dict)  # (partition, offset) -> row


def start_standalone(tmp: Path, *, max_entries_per_ledger: int = 60, bookies: int = 1
                     ) -> Standalone:  # fmt: skip
    config = tmp / "ledgerwire.toml"
    config.write_text(f"[storage]\nmax_entries_per_ledger = {max_entries_per_ledger}\n")
    broker = Standalone(tmp / "data", bookies=bookies, extra_args=["--config", str(config)])
    broker.start()
    return broker


def create_topic(broker: Standalone, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)


def produce_history(broker: Standalone, topic: str, count: int, partitions: int = 2
                    ) -> ProducedTopic:  # fmt: skip
    """`count` messages, a fifth with each codec, keyed (some null keys), with headers and
    increasing CreateTime timestamps; returns what the broker acknowledged."""
    create_topic(broker, topic, partitions)
    produced = ProducedTopic(topic, partitions)
    failures: list[str] = []
    per_codec = count // len(CODECS)
    i = 0
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                             "linger.ms": 5, "batch.num.messages": 200,
                             "enable.idempotence": True})  # fmt: skip
        for _ in range(per_codec if codec != CODECS[-1] else count - i):
            key = None if i % 7 == 0 else f"key-{i % 101}".encode()
            value = f"value-{i}-{codec}".encode() * (1 + i % 3)
            headers = [("n", str(i).encode()), ("codec", codec.encode())]
            ts = BASE_TS + i

            def done(err, msg, key=key, value=value, headers=headers, ts=ts):  # type: ignore[no-untyped-def]
                if err is not None:
                    failures.append(str(err))
                    return
                produced.rows[(msg.partition(), msg.offset())] = (key, value, ts, headers)

            while True:
                try:
                    producer.produce(topic, value=value, key=key, timestamp=ts, headers=headers,
                                     partition=i % partitions, on_delivery=done)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            i += 1
        assert producer.flush(300) == 0
    assert not failures, failures[:5]
    assert len(produced.rows) == count
    return produced
