"""RocketMQ pull of a topic whose older ledgers are offloaded and whose bookie copies are gone:
every message comes back byte-identical from a `ledgerwire standalone` (RocketMQ remoting on
the wire, [offload] driver = "filesystem", small ledgers), across a restart."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio

from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.message_encoding import decode_stored_messages
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "tiered-rq"
MESSAGES = 300


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One standalone for the module's tests (distinct topics; each test restarts it)."""
    tmp_path = tmp_path_factory.mktemp("tiered-rocketmq")
    config = tmp_path / "ledgerwire.toml"
    config.write_text(
        "[storage]\nmax_entries_per_ledger = 40\n"
        f'[offload]\ndriver = "filesystem"\ndirectory = "{tmp_path / "tier"}"\n'
        "deletion_lag_s = 0\ninterval_s = 3600\n"
    )
    sa = Standalone(tmp_path / "data", extra_args=["--config", str(config)])
    sa.start()
    try:
        yield sa
    finally:
        sa.stop()


async def connect(broker: str) -> RawClient:
    """The RocketMQ listener may open a moment after the Kafka one (after a restart)."""
    with trio.fail_after(60):
        while True:
            try:
                return await RawClient.connect(broker)
            except OSError:
                await trio.sleep(0.2)


async def pull_all(broker: str) -> list[bytes]:
    client = await connect(broker)
    bodies: list[bytes] = []
    try:
        offset = 0
        while len(bodies) < MESSAGES:
            r = await client.call(RC.PULL_MESSAGE, pull_ext(TOPIC, 0, offset), wait_s=30)
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark, offset)
            batch = decode_stored_messages(r.body)
            bodies.extend(m.body for m in batch)
            offset = int(r.ext_fields["nextBeginOffset"])
    finally:
        await client.aclose()
    return bodies


@pytest.mark.timeout(300)
async def test_rocketmq_pull_reads_offloaded_ledgers(server: Standalone) -> None:
    sa = server
    broker = f"127.0.0.1:{sa.rocketmq_broker_port}"
    client = await connect(broker)
    sent = [b"rq-%04d-" % i + bytes(range(i % 200)) for i in range(MESSAGES)]
    for body in sent:
        r = await client.call(RC.SEND_MESSAGE_V2, send_ext(TOPIC, {"TAGS": "t"}), body)
        assert r.code == ResponseCode.SUCCESS, r.remark
    await client.aclose()
    rows = sa.admin("topics", "offload", TOPIC)
    queue0 = next(row for row in rows if row["partition"] == 0)
    assert queue0["ledgers_offloaded"] >= 3 and queue0["ledgers_on_bookies"] == 1, rows
    assert await pull_all(broker) == sent
    sa.restart()
    assert await pull_all(broker) == sent


CPP_TOPIC = "tiered-cpp"
CPP_MESSAGES = 240


def cpp_drain(name_server: str, group: str) -> list[tuple[int, int, bytes]]:
    """Every message of CPP_TOPIC through the official C++ push consumer of a new group, as
    (queue, offset, body); blocking (run it in a thread). Delivery is at least once (a
    rebalance may hand a message over twice): a message seen twice must be the same bytes."""
    from tests.rocketmq.cpp_client import Consumer

    def positions(got: list[Any]) -> set[tuple[int, int]]:
        return {(r.queue_id, r.queue_offset) for r in got}

    consumer = Consumer(name_server, group, CPP_TOPIC)
    try:
        assert consumer.wait_for(lambda got: len(positions(got)) >= CPP_MESSAGES, 120), len(
            consumer.received)
        with consumer.lock:
            seen = {(r.queue_id, r.queue_offset, r.body) for r in consumer.received}
    finally:
        consumer.shutdown()
    assert len(seen) == CPP_MESSAGES, "a redelivered message differs from its first delivery"
    return sorted(seen)


@pytest.mark.timeout(420)
async def test_the_cpp_client_reads_offloaded_history_across_a_restart(server: Standalone
                                                                       ) -> None:
    """The official RocketMQ C++ client (rocketmq-client-python) sends a topic; its older
    ledgers are offloaded and their bookie copies deleted; a C++ push consumer of a new group
    receives every message byte-identical, before and after the broker restarts."""
    from tests.rocketmq.cpp_client import SendStatus, message, producer, send_sync_patiently

    sa = server
    name_server = f"127.0.0.1:{sa.name_server_port}"
    sent = [b"cpp-%04d-" % i + bytes(range(33, 33 + i % 90)) for i in range(CPP_MESSAGES)]

    def produce() -> list[SendStatus]:
        p = producer(name_server, "PG_TIERED")
        try:
            return [send_sync_patiently(p, message(CPP_TOPIC, body, "t")) for body in sent]
        finally:
            p.shutdown()

    assert await trio.to_thread.run_sync(produce) == [SendStatus.OK] * CPP_MESSAGES
    rows = sa.admin("topics", "offload", CPP_TOPIC)
    # every queue: its older ledgers offloaded, their bookie copies gone, the current one
    # (the newer part) on bookies
    assert all(row["ledgers_offloaded"] >= 1 and row["ledgers_on_bookies"] == 1
               and row["bytes_offloaded"] >= row["bytes_on_bookies"] for row in rows), rows
    first = await trio.to_thread.run_sync(cpp_drain, name_server, "CG_TIERED_1")
    assert sorted(body for _, _, body in first) == sorted(sent)
    sa.restart()
    second = await trio.to_thread.run_sync(cpp_drain, name_server, "CG_TIERED_2")
    assert second == first
