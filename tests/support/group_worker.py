"""One consumer-group member as a separate process, for the consumer-group acceptance tests.

    python -m tests.support.group_worker CLIENT BOOTSTRAP TOPIC GROUP [options]

CLIENT is confluent-kafka, kafka-python or aiokafka (kafkajs has tests/node/group_worker.js
speaking the same protocol). The worker subscribes, and after every poll commits what it got
synchronously; it prints one JSON object per line on stdout:

    {"event": "assignment", "partitions": [...], "cause": "assign" | "revoke"}
    {"event": "records", "values": ["..."]}       only after their commit succeeded
    {"event": "commit_failed", "error": "..."}
    {"event": "closed"}

SIGTERM closes the consumer (a dynamic member leaves the group); the tests SIGKILL it to
simulate a crash. This helper must never decide anything for the test: it only reports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

STOP = False


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def _stop(*_: object) -> None:
    global STOP
    STOP = True


class Assignment:
    """The partitions this member owns, kept from rebalance callbacks (eager or incremental)."""

    def __init__(self) -> None:
        self.owned: set[int] = set()

    def assigned(self, partitions: list[int]) -> None:
        self.owned |= set(partitions)
        emit("assignment", partitions=sorted(self.owned), cause="assign", delta=sorted(partitions))

    def revoked(self, partitions: list[int]) -> None:
        self.owned -= set(partitions)
        emit("assignment", partitions=sorted(self.owned), cause="revoke", delta=sorted(partitions))


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, KafkaException

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if args.protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update(
            {
                "session.timeout.ms": args.session_timeout_ms,
                "heartbeat.interval.ms": args.heartbeat_interval_ms,
                "partition.assignment.strategy": args.strategy or "range,roundrobin",
            }
        )
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)
    owned = Assignment()
    consumer.subscribe(
        [args.topic],
        on_assign=lambda c, tps: owned.assigned([tp.partition for tp in tps]),
        on_revoke=lambda c, tps: owned.revoked([tp.partition for tp in tps]),
        on_lost=lambda c, tps: owned.revoked([tp.partition for tp in tps]),
    )
    while not STOP:
        messages = [m for m in consumer.consume(100, timeout=0.2) if m.error() is None]
        if not messages:
            continue
        try:
            consumer.commit(asynchronous=False)
            emit("records", values=[(m.value() or b"").decode() for m in messages])
        except KafkaException as exc:
            emit("commit_failed", error=str(exc))
    consumer.close()
    emit("closed")


def run_kafka_python(args: argparse.Namespace) -> None:
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.errors import KafkaError

    owned = Assignment()

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            owned.revoked([tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned: Any) -> None:
            owned.assigned([tp.partition for tp in assigned])

    extra: dict[str, Any] = {}
    if args.instance_id:
        extra["group_instance_id"] = args.instance_id
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        **extra,
    )
    consumer.subscribe([args.topic], listener=Listener())
    while not STOP:
        batches = consumer.poll(timeout_ms=200)
        values = [r.value.decode() for records in batches.values() for r in records]
        if not values:
            continue
        try:
            consumer.commit()
            emit("records", values=values)
        except KafkaError as exc:
            emit("commit_failed", error=repr(exc))
    consumer.close()
    emit("closed")


async def run_aiokafka(args: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import KafkaError

    owned = Assignment()

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            owned.revoked([tp.partition for tp in revoked])

        async def on_partitions_assigned(self, assigned: Any) -> None:
            owned.assigned([tp.partition for tp in assigned])

    extra: dict[str, Any] = {}
    if args.instance_id:
        extra["group_instance_id"] = args.instance_id
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, _stop)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        **extra,
    )
    await consumer.start()
    consumer.subscribe([args.topic], listener=Listener())
    while not STOP:
        batches = await consumer.getmany(timeout_ms=200)
        values = [r.value.decode() for records in batches.values() for r in records]
        if not values:
            continue
        try:
            await consumer.commit()
            emit("records", values=values)
        except KafkaError as exc:
            emit("commit_failed", error=repr(exc))
    await consumer.stop()
    emit("closed")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=["confluent-kafka", "kafka-python", "aiokafka"])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--instance-id")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    parser.add_argument("--strategy", help="librdkafka partition.assignment.strategy")
    parser.add_argument("--protocol", choices=["classic", "consumer"], default="classic")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    if args.client == "confluent-kafka":
        run_confluent(args)
    elif args.client == "kafka-python":
        run_kafka_python(args)
    else:
        asyncio.run(run_aiokafka(args))


if __name__ == "__main__":
    main()
