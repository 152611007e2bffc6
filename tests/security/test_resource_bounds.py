"""Bounded resources before and after login, against a real secured standalone.

- A frame announced above sasl.server.max.receive.size (512 KiB) before login closes the
  connection without the broker buffering it: three 48 MiB announcements (with 8 MiB of
  body sent each) leave the broker's RSS within 32 MiB of where it was.
- max.connections.per.ip: the connections past the limit are closed at once.
- A failed login is answered no sooner than connection.failed.authentication.delay.ms.
- One logged-in user pipelining 40 Fetch requests of up to 50 MB over a ~24 MB topic without
  reading the answers: a connection holds one Fetch answer at a time (it is not read further
  while one waits), so the broker grows by less than 200 MiB (it grew by 412-764 MiB before).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator

import pytest
import trio

from protocols.kafka.record_batch import build_batch
from tests.kafka_server.kafka_wire_client import WireClient
from tests.support.secured_standalone import login, running, sasl_plain, secured_standalone
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PER_IP = 6
MIB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    standalone = secured_standalone(tmp_path_factory.mktemp("bounds"),
                                    extra_kafka=f"max_connections_per_ip = {PER_IP}\n")
    with running(standalone):
        yield standalone


def rss_bytes(server: Standalone) -> int:
    assert server.proc is not None
    with open(f"/proc/{server.proc.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_oversize_frame_before_login_closes_without_growing(server: Standalone) -> None:
    await trio.sleep(1.0)  # let start-up allocations settle
    before = rss_bytes(server)
    clients = [await WireClient.connect(server.kafka_port) for _ in range(3)]
    try:
        for client in clients:
            await client.send_raw(struct.pack(">i", 48 * MIB))
            try:
                for _ in range(8):
                    await client.send_raw(b"\0" * MIB)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # closed by the broker while sending: the point
        for client in clients:
            assert await client.closed_by_server(10)
        print(f"oversize frames: RSS grew by {(rss_bytes(server) - before) / MIB:.1f} MiB")
        assert rss_bytes(server) - before < 32 * MIB
    finally:
        for client in clients:
            await client.aclose()
    assert "closing connection" in server.log()


async def test_connections_per_ip_are_limited(server: Standalone) -> None:
    clients = [await WireClient.connect(server.kafka_port) for _ in range(PER_IP + 3)]
    try:
        closed = [await client.closed_by_server(0.5) for client in clients]
        assert closed.count(False) == PER_IP and closed[PER_IP:] == [True] * 3
    finally:
        for client in clients:
            await client.aclose()
    await trio.sleep(0.2)  # the broker sees the closes: a new connection is admitted again
    again = await login(server.kafka_port, "alice")
    await again.aclose()


async def test_failed_login_is_answered_after_a_delay(server: Standalone) -> None:
    client = await WireClient.connect(server.kafka_port)
    try:
        started = time.monotonic()
        answer = await sasl_plain(client, "alice", "wrong")
        assert answer["error_code"] != 0
        assert time.monotonic() - started >= 0.09
        assert await client.closed_by_server(5)
    finally:
        await client.aclose()


async def test_pipelined_large_fetches_keep_the_broker_bounded(server: Standalone) -> None:
    admin = await login(server.kafka_port, "admin")
    try:
        made = await admin.request(19, 5, {"topics": [
            {"name": "big", "num_partitions": 1, "replication_factor": 1}]})
        assert made["topics"][0]["error_code"] == 0
        chunk = os.urandom(1_000_000)
        for _ in range(24):
            sent = await admin.request(0, 9, {"acks": -1, "timeout_ms": 30000, "topic_data": [
                {"name": "big", "partition_data": [
                    {"index": 0, "records": build_batch([(None, chunk)])}]}]}, timeout_s=60)
            assert sent["responses"][0]["partition_responses"][0]["error_code"] == 0
    finally:
        await admin.aclose()
    await trio.sleep(1.0)
    before = rss_bytes(server)
    reader = await login(server.kafka_port, "admin")
    try:
        fetch = {"max_wait_ms": 0, "max_bytes": 50_000_000, "topics": [
            {"topic": "big", "partitions": [{"partition": 0, "fetch_offset": 0,
                                             "partition_max_bytes": 50_000_000}]}]}
        with trio.move_on_after(20):
            for _ in range(40):
                await reader.send(1, 12, fetch)
        peak = before
        for _ in range(30):  # the client reads nothing for 6 s
            peak = max(peak, rss_bytes(server))
            await trio.sleep(0.2)
        print(f"pipelined fetches: RSS grew by {(peak - before) / MIB:.0f} MiB")
        assert peak - before < 200 * MIB, f"grew by {(peak - before) / MIB:.0f} MiB"
        # and the answers are whole once the client reads them
        _, first = await reader.receive(60)
        records = first["responses"][0]["partitions"][0]["records"]
        assert len(records) >= 23_000_000
    finally:
        await reader.aclose()
