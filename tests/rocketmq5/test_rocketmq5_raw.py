"""RocketMQ 5 calls the real clients do not let a test shape, made raw (grpcio and the
generated classes) against a real `ledgerwire standalone`."""

from __future__ import annotations

import time

import pytest

from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from tests.rocketmq5.support import RawClient
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_one_ack_message_settles_many_handles_each_with_its_own_status(
        module_standalone: Standalone) -> None:
    topic, group = "r5-raw-batch-ack", "CG_RAW_BATCH"
    with RawClient(f"127.0.0.1:{module_standalone.rocketmq_grpc_port}") as client:
        assert client.route(topic).status.code == pb.OK
        for i in range(6):  # all to queue 0
            assert client.send(topic, b"m%d" % i, f"RAWACK{i:04d}").status.code == pb.OK
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            got += client.receive(topic, group, batch=6, invisible_s=2)[1]
        assert sorted(m.body for m in got) == [b"m%d" % i for i in range(6)]
        first = got[0].system_properties
        entries = [(m.system_properties.message_id, m.system_properties.receipt_handle)
                   for m in got[:5]]
        answer = client.ack(topic, group, entries)  # one durable write for the queue
        assert [e.status.code for e in answer.entries] == [pb.OK] * 5
        assert answer.status.code == pb.OK
        # The same handle again, a bogus one, one of nothing in flight:
        answer = client.ack(topic, group, [
            (first.message_id, first.receipt_handle), ("X", "not-a-handle"),
            (got[5].system_properties.message_id, "0.999.1.1")])
        assert [e.status.code for e in answer.entries] == [pb.INVALID_RECEIPT_HANDLE] * 3
        assert answer.status.code == pb.INVALID_RECEIPT_HANDLE
        time.sleep(3)  # past the invisible duration: only the unacknowledged one comes back
        again: list = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not again:
            again += client.receive(topic, group, batch=6, invisible_s=10)[1]
        assert [m.body for m in again] == [got[5].body]
        assert again[0].system_properties.delivery_attempt == 2


def test_a_malformed_sql92_filter_is_refused_with_its_reason(
        module_standalone: Standalone) -> None:
    with RawClient(f"127.0.0.1:{module_standalone.rocketmq_grpc_port}") as client:
        assert client.route("r5-raw-sql").status.code == pb.OK
        for bad in ("a >", "a IN (1)", "(" * 100 + "a = 1" + ")" * 100):
            code, messages = client.receive("r5-raw-sql", "CG_RAW_SQL", expression=bad,
                                            sql=True, poll_s=1)
            assert (code, messages) == (pb.ILLEGAL_FILTER_EXPRESSION, [])
        code, _ = client.receive("r5-raw-sql", "CG_RAW_SQL", expression="a = 1", sql=True,
                                 poll_s=1)
        assert code == pb.MESSAGE_NOT_FOUND  # a good one is served (nothing to deliver yet)


def test_pull_message_reads_a_queue_from_the_clients_offset(
        module_standalone: Standalone) -> None:
    from concurrent.futures import ThreadPoolExecutor

    topic, group = "r5-raw-pull", "CG_RAW_PULL"
    with RawClient(f"127.0.0.1:{module_standalone.rocketmq_grpc_port}") as client:
        assert client.route(topic).status.code == pb.OK
        for i in range(5):  # all to queue 0
            assert client.send(topic, b"p%d" % i, f"RAWPULL{i:04d}", i=str(i)).status.code \
                == pb.OK
        code, got, next_offset = client.pull(topic, group, 0, batch=3)
        assert (code, [m.body for m in got], next_offset) == (pb.OK, [b"p0", b"p1", b"p2"], 3)
        assert [m.system_properties.queue_offset for m in got] == [0, 1, 2]
        assert not got[0].system_properties.receipt_handle  # nothing held: the client's offset
        code, got, next_offset = client.pull(topic, group, 3)
        assert (code, [m.body for m in got], next_offset) == (pb.OK, [b"p3", b"p4"], 5)
        # the same offset again: the same messages (pulling settles nothing)
        assert [m.body for m in client.pull(topic, group, 3)[1]] == [b"p3", b"p4"]
        code, got, next_offset = client.pull(topic, group, 0, sql="i > 2")
        assert (code, [m.body for m in got], next_offset) == (pb.OK, [b"p3", b"p4"], 5)
        assert client.pull(topic, group, 5, poll_s=0.5) == (pb.MESSAGE_NOT_FOUND, [], 5)
        assert client.pull(topic, group, 99) == (pb.ILLEGAL_OFFSET, [], 5)
        # a long poll returns as soon as the next message is stored
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(client.pull, topic, group, 5, 32, 25.0)
            time.sleep(0.5)  # not needed for the answer: a pull after the send gets it too
            assert client.send(topic, b"p5", "RAWPULL0005").status.code == pb.OK
            code, got, next_offset = waiting.result(timeout=30)
        assert (code, [m.body for m in got], next_offset) == (pb.OK, [b"p5"], 6)
        # bad requests are refused with their reason
        assert client.pull(topic, group, 0, batch=0)[0] == pb.BAD_REQUEST
        assert client.pull(topic, group, 0, sql="i >")[0] == pb.ILLEGAL_FILTER_EXPRESSION
