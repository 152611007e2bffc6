"""RocketMQ 5 clients against a real `ledgerwire standalone`: PyPI rocketmq-python-client 5.1.2
(its own virtualenv, .venv-rocketmq5) over the gRPC endpoint, with confluent-kafka reading and
writing the same topics."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import trio
from confluent_kafka import Consumer, Message, Producer

from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_group_config import update_group
from tests.rocketmq5.support import received, run5
from tests.support.standalone import Standalone, running_standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# A receive that ends after one long poll (the client waits 2 s on the server): what the group
# could be given now, all queues looked at; for "nothing left" checks.
NOTHING_LEFT = ("--max-seconds", "0.5")
INVISIBLE_S = 5  # of the held and the acknowledged record in the restart test


def endpoint(server: Standalone) -> str:
    return f"127.0.0.1:{server.rocketmq_grpc_port}"


def kafka_records(server: Standalone, topic: str, count: int,
                  timeout_s: float = 30) -> list[Message]:
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"k-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                out.append(m)
    finally:
        consumer.close()
    return out


def headers_of(record: Message) -> dict[str, str | bytes | None]:
    headers = record.headers()
    return headers if isinstance(headers, dict) else dict(headers or [])


def test_send_receive_ack_and_one_topic_space_with_kafka(module_standalone: Standalone) -> None:
    ep = endpoint(module_standalone)
    sent = run5("produce", ep, "r5-basic", "--count", "12", "--tag", "TagA", "--prefix", "b")
    assert [s["offset"] for s in sent] != [] and len({s["message_id"] for s in sent}) == 12
    got = received(run5("receive", ep, "r5-basic", "--consumer-group", "basic", "--expect", "12"))
    assert sorted(m["body"] for m in got) == sorted(f"b-{i}" for i in range(12))
    assert {m["attempt"] for m in got} == {1} and {m["tag"] for m in got} == {"TagA"}
    assert {m["message_id"] for m in got} == {s["message_id"] for s in sent}
    assert all(m["keys"] == [f"key-{m['props']['index']}"] for m in got)
    # Everything was acknowledged: nothing comes back.
    again = run5("receive", ep, "r5-basic", "--consumer-group", "basic", *NOTHING_LEFT)
    assert received(again) == []

    # A Kafka consumer reads what the 5.x producer wrote, properties as headers.
    records = kafka_records(module_standalone, "r5-basic", 12)
    assert sorted(r.value() or b"" for r in records) == sorted(f"b-{i}".encode()
                                                                for i in range(12))
    headers = headers_of(records[0])
    assert headers["TAGS"] == b"TagA" and b"index" in {k.encode() for k in headers}

    # And a 5.x consumer reads what a Kafka producer wrote.
    producer = Producer({"bootstrap.servers": module_standalone.bootstrap})
    for i in range(3):
        producer.produce("r5-basic", value=f"kafka-{i}".encode(), key=b"k", partition=i % 4)
    producer.flush(30)
    got = received(run5("receive", ep, "r5-basic", "--consumer-group", "basic", "--expect", "3"))
    assert sorted(m["body"] for m in got) == ["kafka-0", "kafka-1", "kafka-2"]


def test_async_sends_all_in_flight_are_each_acknowledged_once(
        module_standalone: Standalone) -> None:
    ep = endpoint(module_standalone)
    sent = run5("produce", ep, "r5-async", "--count", "40", "--send-async", "--prefix", "a")
    assert len({s["message_id"] for s in sent}) == 40
    got = received(run5("receive", ep, "r5-async", "--consumer-group", "async", "--expect",
                        "40", "--batch", "32"))
    assert sorted(m["body"] for m in got) == sorted(f"a-{i}" for i in range(40))
    assert {m["message_id"] for m in got} == {s["message_id"] for s in sent}


def test_unacknowledged_messages_come_back_with_their_attempt_counted(
        module_standalone: Standalone) -> None:
    ep = endpoint(module_standalone)
    run5("produce", ep, "r5-redeliver", "--count", "2", "--prefix", "r")
    taken = time.monotonic()
    first = received(run5("receive", ep, "r5-redeliver", "--consumer-group", "redo",
                          "--expect", "2", "--action", "none", "--invisible-s", "12"))
    assert sorted(m["body"] for m in first) == ["r-0", "r-1"]
    assert {m["attempt"] for m in first} == {1}
    # Invisible meanwhile: another receive gets nothing.
    hidden = run5("receive", ep, "r5-redeliver", "--consumer-group", "redo", "--max-seconds", "1")
    assert received(hidden) == []
    time.sleep(max(0.0, taken + 12.5 - time.monotonic()))
    # ChangeInvisibleDuration renews the lock (6 s); the records then come back once more.
    taken = time.monotonic()
    second = received(run5("receive", ep, "r5-redeliver", "--consumer-group", "redo",
                           "--expect", "2", "--action", "invisible", "--change-s", "6"))
    assert {m["attempt"] for m in second} == {2}
    time.sleep(max(0.0, taken + 6.5 - time.monotonic()))
    third = received(run5("receive", ep, "r5-redeliver", "--consumer-group", "redo",
                          "--expect", "2"))
    assert sorted(m["body"] for m in third) == ["r-0", "r-1"]
    assert {m["attempt"] for m in third} == {3}
    assert received(run5("receive", ep, "r5-redeliver", "--consumer-group", "redo",
                         *NOTHING_LEFT)) == []


def test_tag_filter_and_message_group(module_standalone: Standalone) -> None:
    ep = endpoint(module_standalone)
    run5("produce", ep, "r5-tags", "--count", "3", "--tag", "keep", "--prefix", "keep")
    run5("produce", ep, "r5-tags", "--count", "3", "--tag", "drop", "--prefix", "drop")
    got = received(run5("receive", ep, "r5-tags", "--consumer-group", "tags", "--filter", "keep",
                        "--expect", "3"))
    assert sorted(m["body"] for m in got) == ["keep-0", "keep-1", "keep-2"]
    assert received(run5("receive", ep, "r5-tags", "--consumer-group", "tags", "--filter", "keep",
                         *NOTHING_LEFT)) == []
    run5("produce", ep, "r5-fifo", "--count", "3", "--group", "order-7", "--prefix", "f")
    got = received(run5("receive", ep, "r5-fifo", "--consumer-group", "fifo", "--expect", "3"))
    assert {m["group"] for m in got} == {"order-7"}
    records = kafka_records(module_standalone, "r5-fifo", 3)
    assert {headers_of(r)["__SHARDINGKEY"] for r in records} == {b"order-7"}
    assert len({r.partition() for r in records}) == 1  # one message group, one queue


def test_sql92_filter_on_properties_and_tags(module_standalone: Standalone) -> None:
    ep = endpoint(module_standalone)
    run5("produce", ep, "r5-sql", "--count", "4", "--tag", "keep", "--prefix", "keep")
    run5("produce", ep, "r5-sql", "--count", "4", "--tag", "drop", "--prefix", "drop")
    sql = "TAGS = 'keep' AND (index BETWEEN 1 AND 2 OR index = 3) AND missing IS NULL"
    got = received(run5("receive", ep, "r5-sql", "--consumer-group", "sql", "--sql", sql,
                        "--expect", "3"))
    assert sorted(m["body"] for m in got) == ["keep-1", "keep-2", "keep-3"]
    # What the filter left out is settled for the group, as a tag filter's is.
    assert received(run5("receive", ep, "r5-sql", "--consumer-group", "sql", "--sql", sql,
                         *NOTHING_LEFT)) == []


def test_a_fifo_group_gets_a_message_groups_next_message_only_after_an_ack(
        module_standalone: Standalone) -> None:
    async def make_fifo_group() -> None:
        client = await RawClient.connect(f"127.0.0.1:{module_standalone.rocketmq_broker_port}")
        try:
            await update_group(client, groupName="fifo-consumers", consumeMessageOrderly=True)
        finally:
            await client.aclose()

    trio.run(make_fifo_group)
    ep = endpoint(module_standalone)
    run5("produce", ep, "r5-fifo-order", "--count", "4", "--group", "g-1", "--prefix", "o")
    lines = received(run5("fifo-check", ep, "r5-fifo-order", "--consumer-group",
                          "fifo-consumers", "--expect", "4", "--invisible-s", "20"))
    assert [m["body"] for m in lines] == ["o-0", "o-1", "o-2", "o-3"]
    assert all(m["meanwhile"] == [] for m in lines)  # nothing while the previous was in flight


def test_push_consumer_consumes_everything_once(module_standalone: Standalone) -> None:
    ep = endpoint(module_standalone)
    run5("produce", ep, "r5-push", "--count", "6", "--prefix", "p")
    got = received(run5("push", ep, "r5-push", "--consumer-group", "pusher", "--expect", "6",
                        "--max-seconds", "60"))
    assert sorted((m["body"], m["attempt"]) for m in got) == [(f"p-{i}", 1) for i in range(6)]
    # All acknowledged: a simple consumer of the same group finds nothing left.
    assert received(run5("receive", ep, "r5-push", "--consumer-group", "pusher",
                         *NOTHING_LEFT)) == []


def test_delivery_timestamp_delays_the_message(module_standalone: Standalone) -> None:
    ep = endpoint(module_standalone)
    start = time.monotonic()
    run5("produce", ep, "r5-delay", "--count", "1", "--delay-ms", "4000", "--prefix", "later")
    got = received(run5("receive", ep, "r5-delay", "--consumer-group", "delay", "--expect", "1",
                        "--max-seconds", "20"))
    assert [m["body"] for m in got] == ["later-0"]
    assert time.monotonic() - start >= 3.5


def test_recall_drops_a_timed_message_before_its_delivery(module_standalone: Standalone) -> None:
    ep = endpoint(module_standalone)
    # each send and its recall must land within the delay: 10 s, for a loaded machine
    out = run5("recall", ep, "r5-recall", "--count", "4", "--delay-ms", "10000", "--prefix", "rc")
    sent = {line["sent"]: line for line in out if "sent" in line}
    recalled = [sent["rc-0"]["message_id"], sent["rc-2"]["message_id"]]
    assert [line["recalled"] for line in out if "recalled" in line] == recalled
    assert [line["again"] for line in out if "again" in line] == recalled  # the same answer
    got = received(run5("receive", ep, "r5-recall", "--consumer-group", "recall", "--expect",
                        "2", "--max-seconds", "60"))
    assert sorted(m["body"] for m in got) == ["rc-1", "rc-3"]
    # rc-0 and rc-2 were due before rc-3 (sent before it, the same delay): had the timer
    # delivered them, they would be here by now
    assert received(run5("receive", ep, "r5-recall", "--consumer-group", "recall",
                         *NOTHING_LEFT)) == []
    # no longer waiting (delivered, or recalled and past its time): nothing to recall
    for body in ("rc-1", "rc-0"):
        late = run5("recall", ep, "r5-recall", "--handle", sent[body]["recall_handle"])
        assert late[0]["refused"] == "NotFoundException", late
    forged = run5("recall", ep, "r5-recall", "--handle", "bm90IGEgaGFuZGxl")
    assert forged[0]["refused"] == "BadRequestException", forged


def test_a_recall_survives_sigkill(dlq_standalone: Standalone) -> None:
    ep = endpoint(dlq_standalone)
    out = run5("recall", ep, "r5-recall-kill", "--count", "2", "--delay-ms", "10000",
               "--prefix", "rk")
    assert len([line for line in out if "recalled" in line]) == 1  # rk-0
    dlq_standalone.kill()  # SIGKILL: the recall marker must already be durable
    dlq_standalone.start()
    got = received(run5("receive", ep, "r5-recall-kill", "--consumer-group", "recall",
                        "--expect", "1", "--max-seconds", "60"))
    assert [m["body"] for m in got] == ["rk-1"]
    # rk-0 was due before rk-1: had the recall been lost, it would be here by now
    assert received(run5("receive", ep, "r5-recall-kill", "--consumer-group", "recall",
                         *NOTHING_LEFT)) == []


def test_transactions_commit_rollback_and_orphan_check_back(
        module_standalone: Standalone) -> None:
    ep = endpoint(module_standalone)
    out = run5("transaction", ep, "r5-txn", "--decisions", "commit,rollback,none",
               "--check-answer", "commit", "--prefix", "t", "--linger-s", "40",
               "--until-checked")
    assert [line["checked"] for line in out if "checked" in line] == ["t-none"]
    got = received(run5("receive", ep, "r5-txn", "--consumer-group", "txn", "--expect", "2"))
    assert sorted(m["body"] for m in got) == ["t-commit", "t-none"]
    assert received(run5("receive", ep, "r5-txn", "--consumer-group", "txn",
                         *NOTHING_LEFT)) == []


@pytest.fixture(scope="module")
def dlq_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One standalone with max_reconsume_times 1 for the module's tests that kill or restart
    it (distinct topics); a test leaves it running."""
    base = tmp_path_factory.mktemp("dlq")
    config = base / "ledgerwire.toml"
    config.write_text("[rocketmq]\nmax_reconsume_times = 1\n")
    with running_standalone(base / "data", extra_args=["--config", str(config)]) as server:
        yield server


def test_dead_letter_after_max_attempts_and_state_survives_a_restart(
        dlq_standalone: Standalone) -> None:
    ep = endpoint(dlq_standalone)
    run5("produce", ep, "r5-dlq", "--count", "1", "--prefix", "poison")
    run5("produce", ep, "r5-keep", "--count", "2", "--prefix", "k")
    for attempt in (1, 2):  # max_reconsume_times 1: two attempts
        got = received(run5("receive", ep, "r5-dlq", "--consumer-group", "dlq", "--expect", "1",
                            "--action", "none", "--invisible-s", "1", "--max-seconds", "15"))
        assert [(m["body"], m["attempt"]) for m in got] == [("poison-0", attempt)]
        time.sleep(1.5)
    assert received(run5("receive", ep, "r5-dlq", "--consumer-group", "dlq",
                         *NOTHING_LEFT)) == []
    dead = received(run5("receive", ep, "%DLQ%dlq", "--consumer-group", "dlq-reader",
                         "--expect", "1"))
    assert [m["body"] for m in dead] == ["poison-0"]

    # In-flight state is durable: one record acked, one held, across a restart (acked first:
    # the held one is then the only one left, whatever its invisibility and the machine's load).
    acked = received(run5("receive", ep, "r5-keep", "--consumer-group", "keep", "--expect", "1",
                          "--batch", "1", "--invisible-s", str(INVISIBLE_S)))
    held_at = time.monotonic()
    held = received(run5("receive", ep, "r5-keep", "--consumer-group", "keep", "--expect", "1",
                         "--batch", "1", "--action", "none", "--invisible-s", str(INVISIBLE_S)))
    assert {held[0]["body"], acked[0]["body"]} == {"k-0", "k-1"}
    dlq_standalone.stop()
    dlq_standalone.start()
    # Received until well past both records' invisibility (the acked one's too, were its ack
    # lost): only the held one comes back, once.
    until = held_at + INVISIBLE_S + 6 - time.monotonic()
    back = received(run5("receive", ep, "r5-keep", "--consumer-group", "keep", "--expect", "2",
                         "--max-seconds", str(max(until, 3.0))))
    assert [(m["body"], m["attempt"]) for m in back] == [(held[0]["body"], 2)]


def test_unknown_rpcs_and_garbage_get_clean_errors(module_standalone: Standalone) -> None:
    import socket

    import grpc

    ep = endpoint(module_standalone)
    with grpc.insecure_channel(ep) as channel:
        call = channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchThing")
        with pytest.raises(grpc.RpcError) as refused:
            call(b"", timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        bad = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")
        with pytest.raises(grpc.RpcError) as malformed:
            bad(b"\xff\xff\xff\xff", timeout=10)
        assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with socket.create_connection(("127.0.0.1", module_standalone.rocketmq_grpc_port), 5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\x00" * 4096)
        s.settimeout(10)
        while s.recv(4096):
            pass  # the server closes the connection
    # The endpoint still serves.
    assert run5("produce", ep, "r5-after-garbage", "--count", "1")[0]["offset"] == 0
