"""The Kafka listener: ordering, acks=0, bad input, oversize frames, shutdown, fuzzing."""

from __future__ import annotations

import logging
import struct

import hypothesis.strategies as st
import pytest
import trio
from hypothesis import HealthCheck, given, settings

from protocols.kafka.codec import decode_response
from protocols.kafka.errors import ErrorCode
from protocols.kafka.record_batch import build_batch
from tests.kafka_server.conftest import KafkaStack, running_stack
from tests.kafka_server.kafka_wire_client import ConnectionClosed, WireClient
from tests.kafka_server.test_kafka_handlers_wire import (
    API_VERSIONS,
    FETCH,
    METADATA,
    PRODUCE,
    create_topic,
    fetch_body,
    fetched_records,
    kv_batch,
    produce,
)

VERSIONS_BODY = {"client_software_name": "t", "client_software_version": "1"}


def produce_body(topic: str, records: bytes, acks: int = -1) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0,
                                                               "records": records}]}]}


async def test_pipelined_requests_are_answered_in_order(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "pipe")
        # A long-polling fetch first: everything behind it must wait for it.
        await client.send(FETCH, 11, fetch_body("pipe", 0, max_wait_ms=400, min_bytes=1))
        kinds = []
        for i in range(60):
            if i % 3 == 0:
                await client.send(PRODUCE, 9, produce_body("pipe", kv_batch(f"m{i}", 2)))
                kinds.append("produce")
            elif i % 3 == 1:
                await client.send(API_VERSIONS, 3, VERSIONS_BODY)
                kinds.append("versions")
            else:
                await client.send(METADATA, 9, {"topics": [{"name": "pipe"}],
                                                "allow_auto_topic_creation": False})
                kinds.append("metadata")
        _, first = await client.receive()  # asserts correlation order
        assert fetched_records(first["responses"][0]["partitions"][0])  # woke on data
        offsets = []
        for kind in kinds:
            _, answer = await client.receive()
            if kind == "produce":
                offsets.append(answer["responses"][0]["partition_responses"][0]["base_offset"])
        assert offsets == [2 * i for i in range(20)]


async def test_acks_zero_gets_no_response(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "a0")
        for i in range(5):
            await client.send(PRODUCE, 9, produce_body("a0", kv_batch(f"z{i}", 1), acks=0),
                              expect_response=False)
        answer = await client.request(API_VERSIONS, 3, VERSIONS_BODY)  # the next answer is this
        assert answer["error_code"] == 0
        plog = await stack.topics.partition("a0", 0)
        with trio.fail_after(5):
            while plog.high_watermark < 5:
                await plog.wait_for_data(plog.high_watermark, 1.0)


async def test_failed_acks_zero_produce_closes_the_connection(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await client.send(PRODUCE, 9, produce_body("no-such-topic", kv_batch("x", 1), acks=0),
                          expect_response=False)
        assert await client.closed_by_server()


async def test_garbage_closes_only_that_connection(
    stack: KafkaStack, caplog: pytest.LogCaptureFixture
) -> None:
    async with await stack.client() as good, await stack.client() as bad:
        await create_topic(good, "g")
        with caplog.at_level(logging.WARNING, logger="ledgerwire.kafka.listener"):
            garbage = b"\x00\x03\x00\x09" + b"\xff" * 40  # Metadata v9 with nonsense body
            await bad.send_raw(struct.pack(">i", len(garbage)) + garbage)
            assert await bad.closed_by_server()
        assert any("malformed" in r.getMessage() for r in caplog.records)
        assert any(getattr(r, "client", "").startswith("127.0.0.1:") for r in caplog.records)
        assert (await produce(good, "g", 0, kv_batch("still", 1)))["error_code"] == 0


async def test_oversize_frame_is_refused_before_its_body() -> None:
    async with running_stack(max_frame_bytes=1024) as stack:
        async with await stack.client() as client:
            # Announce 1 GiB and send nothing more: the server must close without waiting.
            await client.send_raw(struct.pack(">i", 1 << 30) + b"\x00\x12\x00\x03")
            assert await client.closed_by_server(timeout_s=5)
        async with await stack.client() as client:
            assert (await client.request(API_VERSIONS, 3, VERSIONS_BODY))["error_code"] == 0


async def test_unsupported_versions(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        # Produce v99 cannot be answered in a layout the client knows: Kafka closes.
        request = struct.pack(">hhih", 0, 99, 1, 1) + b"x"
        await client.send_raw(struct.pack(">i", len(request)) + request)
        assert await client.closed_by_server()
    async with await stack.client() as client:
        # an API key nobody knows
        request = struct.pack(">hhih", 999, 0, 1, 1) + b"x"
        await client.send_raw(struct.pack(">i", len(request)) + request)
        assert await client.closed_by_server()


async def test_graceful_shutdown_finishes_in_flight_requests() -> None:
    async with running_stack(drain_timeout_s=5.0) as stack:
        client = await stack.client()
        await create_topic(client, "sd")
        await client.send(FETCH, 11, fetch_body("sd", 0, max_wait_ms=500, min_bytes=1))
        await trio.sleep(0.1)
        started = trio.current_time()
        stack.server_scope.cancel()
        _, answer = await client.receive()  # the long poll still gets its (empty) answer
        assert answer["responses"][0]["partitions"][0]["error_code"] == 0
        assert trio.current_time() - started < 3
        assert await client.closed_by_server()
        await client.aclose()
        with pytest.raises(OSError):
            await WireClient.connect(stack.port)


async def test_drain_deadline_cancels_stuck_requests() -> None:
    async with running_stack(drain_timeout_s=0.2) as stack:
        client = await stack.client()
        await create_topic(client, "dd")
        await client.send(FETCH, 11, fetch_body("dd", 0, max_wait_ms=30_000, min_bytes=1))
        await trio.sleep(0.1)
        started = trio.current_time()
        stack.server_scope.cancel()
        with pytest.raises(ConnectionClosed):
            await client.receive()
        assert trio.current_time() - started < 3
        await client.aclose()


# --- fuzzing ----------------------------------------------------------------------------------

KNOWN_PREFIXES = [(key, version) for key, version in
                  [(0, 3), (0, 9), (1, 4), (1, 12), (1, 16), (2, 7), (3, 0), (3, 9), (3, 12),
                   (18, 0), (18, 3), (19, 5), (20, 6), (22, 4), (23, 4), (32, 4), (37, 3),
                   (10, 4)]]


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        key, version = draw(st.sampled_from(KNOWN_PREFIXES))
        payload = struct.pack(">hhi", key, version, draw(st.integers(0, 2**31 - 1)))
        payload += draw(st.binary(max_size=200))
    else:
        payload = draw(st.binary(max_size=200))
    return struct.pack(">i", len(payload)) + payload


async def _fuzz_once(chunks: list[bytes]) -> None:
    async with running_stack(max_frame_bytes=4096) as stack:
        async with await stack.client() as client:
            await create_topic(client, "fz")
            for chunk in chunks:
                try:
                    await client.send_raw(chunk)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
            # Whatever happened to that connection, the server still serves others.
            with trio.fail_after(5):
                async with await stack.client() as other:
                    assert (await other.request(API_VERSIONS, 3, VERSIONS_BODY))[
                        "error_code"] == ErrorCode.NONE
                    answer = await other.request(FETCH, 11, fetch_body("fz", 0))
                    assert answer["responses"][0]["partitions"][0]["error_code"] == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frames(), min_size=1, max_size=5), st.booleans())
def test_fuzz_connection_handler(chunks: list[bytes], split: bool) -> None:
    if split:  # deliver the same bytes in ragged pieces
        data = b"".join(chunks)
        chunks = [data[i:i + 7] for i in range(0, len(data), 7)]
    trio.run(_fuzz_once, chunks)


async def test_response_to_unknown_version_is_parseable_v0(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        request = struct.pack(">hhih", 18, 5, 42, -1)
        await client.send_raw(struct.pack(">i", len(request)) + request)
        correlation_id, answer = decode_response(18, 0, await client.receive_frame())
        assert correlation_id == 42 and answer["error_code"] == ErrorCode.UNSUPPORTED_VERSION


async def test_a_failing_handler_answers_unknown_server_error(
    stack: KafkaStack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from protocols.kafka.handlers import HANDLERS

    async def broken(ctx: object, header: object, body: dict) -> dict:
        raise RuntimeError("handler bug")

    spec = HANDLERS[23]
    monkeypatch.setitem(HANDLERS, 23, type(spec)(spec.api_key, spec.name, spec.min_version,
                                                 spec.max_version, broken))
    async with await stack.client() as client:
        with caplog.at_level(logging.ERROR, logger="ledgerwire.kafka.broker"):
            answer = await client.request(23, 4, {"replica_id": -1, "topics": [
                {"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 0,
                                               "leader_epoch": 0}]}]})
        assert answer["topics"][0]["partitions"][0]["error_code"] == \
            ErrorCode.UNKNOWN_SERVER_ERROR
        assert any("handler failed" in r.getMessage() for r in caplog.records)
        # the connection is still fine
        assert (await client.request(API_VERSIONS, 3, VERSIONS_BODY))["error_code"] == 0


async def test_pipelined_requests_keep_kafka_ordering(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        topic_body = {"topics": [{"name": "ord", "num_partitions": 1, "replication_factor": -1,
                                  "assignments": [], "configs": []}],
                      "timeout_ms": 1000, "validate_only": False}
        await client.send(19, 5, topic_body)  # CreateTopics
        await client.send(METADATA, 9, {"topics": [{"name": "ord"}],
                                        "allow_auto_topic_creation": False})
        await client.send(PRODUCE, 9, produce_body("ord", kv_batch("o", 3)))
        await client.send(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "ord", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        await client.send(20, 4, {"topic_names": ["ord"], "timeout_ms": 1000})
        await client.send(METADATA, 9, {"topics": [{"name": "ord"}],
                                        "allow_auto_topic_creation": False})
        answers = [(await client.receive())[1] for _ in range(6)]
        assert answers[0]["topics"][0]["error_code"] == 0
        assert answers[1]["topics"][0]["error_code"] == 0  # saw the CreateTopics before it
        assert answers[2]["responses"][0]["partition_responses"][0]["base_offset"] == 0
        assert answers[3]["topics"][0]["partitions"][0]["offset"] == 3  # saw the Produce
        assert answers[4]["responses"][0]["error_code"] == 0
        assert answers[5]["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_long_poll_does_not_block_the_connection(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "lpc")
        started = trio.current_time()
        await client.send(FETCH, 11, fetch_body("lpc", 0, max_wait_ms=5000, min_bytes=1))
        await client.send(PRODUCE, 9, produce_body("lpc", kv_batch("wake", 1)))
        _, fetched = await client.receive()
        _, produced = await client.receive()
        # The Produce behind the Fetch ran while the Fetch waited, and woke it.
        assert trio.current_time() - started < 2.5
        assert [r.key for r in fetched_records(fetched["responses"][0]["partitions"][0])] == \
            [b"wake-k0"]
        assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0


async def test_a_client_that_stops_reading_is_disconnected() -> None:
    async with running_stack(write_timeout_s=0.3) as stack:
        async with await stack.client() as setup:
            await create_topic(setup, "slow")
            await produce(setup, "slow", 0, build_batch([(b"k", b"x" * 200_000)]))
        client = await stack.client()
        try:
            # Ask for far more than the socket buffers hold and never read the answers.
            for _ in range(200):
                await client.send(FETCH, 11, fetch_body("slow", 0))
            # The server gives up on us: our sends start failing (reset by the peer).
            with trio.fail_after(10), pytest.raises(trio.BrokenResourceError):
                for _ in range(10_000):
                    await client.send(FETCH, 11, fetch_body("slow", 0))
        finally:
            await client.aclose()
