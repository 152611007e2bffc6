"""Drive the real RocketMQ 5 Python client (PyPI rocketmq-python-client) from the tests.

Runs under the client's own virtualenv (its module is named `rocketmq`, like the 4.x C++
client's wrapper), so the tests call it as a subprocess: one sub-command per scenario, results
as JSON lines on stdout.  Never imported by the tests themselves.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

_emitting = threading.Lock()


def emit(**fields: object) -> None:
    with _emitting:  # push consumers call back from several threads
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


def config(args: argparse.Namespace) -> ClientConfiguration:
    return ClientConfiguration(args.endpoint, Credentials(args.ak, args.sk), request_timeout=10)


def subscription_filter(args: argparse.Namespace) -> FilterExpression:
    if args.sql:
        from rocketmq.grpc_protocol import FilterType

        return FilterExpression(args.sql, FilterType.SQL)
    return FilterExpression(args.filter)


def make_message(args: argparse.Namespace, i: int) -> Message:
    m = Message()
    m.topic = args.topic
    m.body = f"{args.prefix}-{i}".encode()
    if args.tag:
        m.tag = args.tag
    m.keys = f"key-{i}"
    m.add_property("index", str(i))
    if args.group:
        m.message_group = args.group
    if args.delay_ms:
        m.delivery_timestamp = int(time.time() * 1000) + args.delay_ms
    return m


def produce(args: argparse.Namespace) -> None:
    producer = Producer(config(args), (args.topic,))
    producer.startup()
    try:
        if args.send_async:  # all in flight at once, then each future's receipt
            futures = [producer.send_async(make_message(args, i)) for i in range(args.count)]
            for i, future in enumerate(futures):
                receipt = future.result(timeout=60)
                emit(sent=i, message_id=receipt.message_id, offset=receipt.offset)
            return
        for i in range(args.count):
            receipt = producer.send(make_message(args, i))
            emit(sent=i, message_id=receipt.message_id, offset=receipt.offset)
    finally:
        producer.shutdown()


class Checker(TransactionChecker):
    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.checked = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        emit(checked=message.body.decode(), message_id=message.message_id)
        self.checked.set()
        return TransactionResolution.COMMIT if self.answer == "commit" else \
            TransactionResolution.ROLLBACK


def track_end_transactions(producer: Producer) -> list[Any]:
    """The futures of the producer's EndTransaction calls, its answers to check-backs among
    them (the client sends those from a thread of its own and only logs how they went)."""
    futures: list[Any] = []
    rpc = producer.rpc_client
    send = rpc.end_transaction_async

    def tracked(*args: Any, **kwargs: Any) -> Any:
        future = send(*args, **kwargs)
        futures.append(future)
        return future

    rpc.end_transaction_async = tracked
    return futures


def transaction(args: argparse.Namespace) -> None:
    """One transaction per decision (commit, rollback, none: left open); with --until-checked
    the producer lives until a check-back was answered and every EndTransaction (that answer
    included) is done, at most --linger-s; else --linger-s."""
    checker = Checker(args.check_answer)
    producer = Producer(config(args), (args.topic,), checker)
    producer.startup()
    ended = track_end_transactions(producer)
    try:
        for decision in args.decisions.split(","):
            txn = producer.begin_transaction()
            m = make_message(args, 0)
            m.body = f"{args.prefix}-{decision}".encode()
            receipt = producer.send(m, txn)
            if decision == "commit":
                txn.commit()
            elif decision == "rollback":
                txn.rollback()
            emit(sent=decision, message_id=receipt.message_id)
        deadline = time.time() + args.linger_s
        while time.time() < deadline:  # an orphan is checked back while the producer lives
            if args.until_checked and checker.checked.is_set() and all(
                    f.done() for f in list(ended)):
                break
            time.sleep(0.2)
    finally:
        producer.shutdown()


def receive(args: argparse.Namespace) -> None:
    consumer = SimpleConsumer(config(args), args.consumer_group,
                              {args.topic: subscription_filter(args)}, await_duration=2)
    consumer.startup()
    got = 0
    deadline = time.time() + args.max_seconds
    try:
        while got < args.expect and time.time() < deadline:
            for m in consumer.receive(args.batch, args.invisible_s) or []:
                got += 1
                emit(body=m.body.decode(), message_id=m.message_id, attempt=m.delivery_attempt,
                     tag=m.tag, keys=sorted(m.keys), props=dict(m.properties),
                     group=m.message_group)
                if args.action == "ack":
                    consumer.ack(m)
                elif args.action == "invisible":
                    consumer.change_invisible_duration(m, args.change_s)
    finally:
        consumer.shutdown()
    emit(done=got)


def push(args: argparse.Namespace) -> None:
    """A PushConsumer; messages whose body ends in "-fail" fail their first attempt."""
    seen: list[tuple[str, int]] = []

    class Listener(MessageListener):
        def consume(self, message: Message) -> ConsumeResult:
            body = message.body.decode()
            seen.append((body, message.delivery_attempt))
            emit(body=body, attempt=message.delivery_attempt)
            if body.endswith("-fail") and message.delivery_attempt == 1:
                return ConsumeResult.FAILURE
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(config(args), args.consumer_group, Listener(),
                            {args.topic: FilterExpression(args.filter)})
    consumer.startup()
    deadline = time.time() + args.max_seconds
    try:
        while len(seen) < args.expect and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # the last acknowledgements go out
    finally:
        consumer.shutdown()
    emit(done=len(seen))


def fifo_check(args: argparse.Namespace) -> None:
    """Receive one message at a time; before acknowledging it, ask once more (a FIFO group
    must get nothing while it is in flight)."""
    consumer = SimpleConsumer(config(args), args.consumer_group,
                              {args.topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    got = 0
    deadline = time.time() + args.max_seconds
    try:
        while got < args.expect and time.time() < deadline:
            for m in consumer.receive(1, args.invisible_s) or []:
                got += 1
                meanwhile = consumer.receive(1, args.invisible_s) or []
                emit(body=m.body.decode(), group=m.message_group,
                     meanwhile=[x.body.decode() for x in meanwhile])
                consumer.ack(m)
    finally:
        consumer.shutdown()
    emit(done=got)


def bench_send(args: argparse.Namespace) -> None:
    producer = Producer(config(args), (args.topic,))
    producer.startup()
    body = b"x" * args.size
    try:
        m = Message()
        m.topic, m.body, m.tag = args.topic, body, "bench"
        producer.send(m)  # warm-up: route, connection, settings
        latencies = []
        start = time.perf_counter()
        for _ in range(args.count):
            m = Message()
            m.topic, m.body, m.tag = args.topic, body, "bench"
            t0 = time.perf_counter()
            producer.send(m)
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
    finally:
        producer.shutdown()
    latencies.sort()
    emit(rate=args.count / elapsed, p50_ms=latencies[len(latencies) // 2] * 1e3,
         p99_ms=latencies[int(len(latencies) * 0.99)] * 1e3)


def bench_receive(args: argparse.Namespace) -> None:
    consumer = SimpleConsumer(config(args), args.consumer_group,
                              {args.topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    got = 0
    start = time.perf_counter()
    try:
        while got < args.expect and time.perf_counter() - start < args.max_seconds:
            for m in consumer.receive(args.batch, args.invisible_s) or []:
                consumer.ack(m)
                got += 1
        elapsed = time.perf_counter() - start
    finally:
        consumer.shutdown()
    emit(rate=got / elapsed, received=got)


def send_until_acked(producer: Producer, args: argparse.Namespace, body: str) -> None:
    """Send one message until acknowledged (a cluster broker may die under the producer)."""
    deadline = time.time() + args.max_seconds
    while True:
        m = Message()
        m.topic, m.body, m.keys = args.topic, body.encode(), body
        try:
            receipt = producer.send(m)
            emit(sent=body, message_id=receipt.message_id)
            return
        except Exception as exc:  # noqa: BLE001 - retried; the test counts the failures
            emit(failed=body, error=type(exc).__name__)
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def recall(args: argparse.Namespace) -> None:
    """Send `count` timed messages (--delay-ms ahead) and recall the even ones (twice); with
    --handle, only recall that handle (the answer or the error's class)."""
    producer = Producer(config(args), (args.topic,))
    producer.startup()
    try:
        if args.handle:
            try:
                emit(recalled=producer.recall_message(args.topic, args.handle))
            except Exception as exc:  # noqa: BLE001 - the test reads the refusal
                emit(refused=type(exc).__name__, message=str(exc))
            return
        for i in range(args.count):
            receipt = producer.send(make_message(args, i))
            emit(sent=f"{args.prefix}-{i}", message_id=receipt.message_id,
                 recall_handle=receipt.recall_handle)
            if i % 2 == 0:
                emit(recalled=producer.recall_message(args.topic, receipt.recall_handle))
                emit(again=producer.recall_message(args.topic, receipt.recall_handle))
    finally:
        producer.shutdown()


def produce_phases(args: argparse.Namespace) -> None:
    """`count` messages "<prefix>-before-i", then (after a line on stdin) `count` more
    "<prefix>-after-i" with the same producer, each sent until acknowledged."""
    producer = Producer(config(args), (args.topic,))
    producer.startup()
    try:
        for phase in ("before", "after"):
            if phase == "after":
                sys.stdin.readline()
            for i in range(args.count):
                send_until_acked(producer, args, f"{args.prefix}-{phase}-{i}")
            emit(phase=phase)
    finally:
        producer.shutdown()


def receive_tolerant(args: argparse.Namespace) -> None:
    """Receive until `expect` distinct bodies came (errors of a dying broker are retried);
    acknowledge only those whose index (the number after the last '-') is even when
    --ack-even, else all; linger a little for redeliveries that must not come."""
    consumer = SimpleConsumer(config(args), args.consumer_group,
                              {args.topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    seen: set[str] = set()
    deadline = time.time() + args.max_seconds
    linger_until = None
    try:
        while time.time() < deadline and (linger_until is None or time.time() < linger_until):
            try:
                messages = consumer.receive(args.batch, args.invisible_s) or []
            except Exception as exc:  # noqa: BLE001 - a dead endpoint in the routes
                emit(error=type(exc).__name__)
                time.sleep(0.5)
                continue
            for m in messages:
                body = m.body.decode()
                acked = not args.ack_even or int(body.rsplit("-", 1)[1]) % 2 == 0
                if acked:
                    try:
                        consumer.ack(m)
                    except Exception as exc:  # noqa: BLE001 - it comes back: acked later
                        emit(ack_failed=body, error=type(exc).__name__)
                        acked = False
                emit(body=body, attempt=m.delivery_attempt, acked=acked,
                     message_id=m.message_id)
                seen.add(body)
            if len(seen) >= args.expect and linger_until is None:
                linger_until = time.time() + args.linger_s
    finally:
        consumer.shutdown()
    emit(done=len(seen))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["produce", "transaction", "receive", "bench-send",
                                        "bench-receive", "fifo-check", "push",
                                        "produce-phases", "receive-tolerant", "recall"])
    p.add_argument("--endpoint", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--ak", default="")
    p.add_argument("--sk", default="")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--prefix", default="m")
    p.add_argument("--tag", default="")
    p.add_argument("--group", default="", help="message group (FIFO)")
    p.add_argument("--delay-ms", type=int, default=0)
    p.add_argument("--decisions", default="commit")
    p.add_argument("--check-answer", default="commit")
    p.add_argument("--linger-s", type=float, default=0.0)
    p.add_argument("--until-checked", action="store_true",
                   help="transaction: stop lingering once a check-back's answer is done")
    p.add_argument("--consumer-group", default="g")
    p.add_argument("--filter", default="*")
    p.add_argument("--sql", default="", help="a SQL92 filter instead of the tag filter")
    p.add_argument("--expect", type=int, default=1)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--invisible-s", type=int, default=15)
    p.add_argument("--change-s", type=int, default=2)
    p.add_argument("--action", choices=["ack", "none", "invisible"], default="ack")
    p.add_argument("--max-seconds", type=float, default=30.0)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--ack-even", action="store_true")
    p.add_argument("--send-async", action="store_true", help="produce: Producer.send_async")
    p.add_argument("--handle", default="", help="recall: this recall handle only")
    args = p.parse_args()
    {"produce": produce, "transaction": transaction, "receive": receive,
     "bench-send": bench_send, "bench-receive": bench_receive,
     "fifo-check": fifo_check, "push": push, "produce-phases": produce_phases,
     "receive-tolerant": receive_tolerant, "recall": recall}[args.command](args)


if __name__ == "__main__":
    main()
