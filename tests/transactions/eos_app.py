"""A consume-transform-produce application (confluent-kafka), run as a subprocess by
tests/integration/test_transactions.py so that it can be killed with SIGKILL mid-transaction.

    python -m tests.transactions.eos_app BOOTSTRAP INPUT OUTPUT GROUP TXN_ID [CRASH_AT_TXN]

Each transaction: consume a few messages, produce their upper-cased values to OUTPUT (same
partition), flush, send the consumer positions with send_offsets_to_transaction, commit.  With
CRASH_AT_TXN = n the n-th transaction (from 0) prints "IN_TXN" after its records are flushed
and then hangs until killed.  The app exits after 4 s without input, counted from its latest
assignment: a successor waits out its crashed predecessor's session before it gets one.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer


def main(argv: list[str]) -> int:
    bootstrap, source, sink, group, txn_id = argv[:5]
    crash_at = int(argv[5]) if len(argv) > 5 else -1
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 20000,
    })
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000, "linger.ms": 5})
    producer.init_transactions(30)
    idle_since = time.monotonic()

    def assigned(_consumer: Consumer, _partitions: list) -> None:
        nonlocal idle_since
        idle_since = time.monotonic()

    consumer.subscribe([source], on_assign=assigned)
    transactions = 0
    while True:
        messages = [m for m in consumer.consume(num_messages=7, timeout=0.5) if not m.error()]
        if not messages:
            if consumer.assignment() and time.monotonic() - idle_since > 4.0:
                break
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        for m in messages:
            producer.produce(sink, key=m.key(), value=(m.value() or b"").upper(),
                             partition=m.partition() or 0)
        producer.flush(30)
        if transactions == crash_at:
            print("IN_TXN", flush=True)
            time.sleep(3600)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        transactions += 1
    print(f"DONE {transactions}", flush=True)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
