"""Share groups on the wire (raw Kafka protocol against a broker with the delivery engine):
heartbeat and assignment, ShareFetch with session epochs, piggybacked and separate
acknowledgements, release and redelivery, session close releasing held records, the offsets
admin APIs, group configs, and bad acknowledgements answered with error codes (hypothesis)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import protocols.kafka.handlers.share_fetch as share_fetch
from gateway.delivery.group_configs import ShareGroupConfigs
from ledger_backend.client.errors import BookieUnavailableError
from protocols.kafka.errors import ErrorCode
from protocols.kafka.record_batch import build_batch, decode_records
from protocols.kafka.share_api import by_duration_ms
from tests.kafka_server.conftest import KafkaStack, running_stack
from tests.kafka_server.kafka_wire_client import WireClient
from tests.kafka_server.test_kafka_handlers_wire import create_topic, kv_batch, produce

HEARTBEAT, DESCRIBE, FETCH, ACK = 76, 77, 78, 79
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92
INCREMENTAL_ALTER_CONFIGS, LIST_GROUPS = 44, 16
ACCEPT, RELEASE, REJECT = 1, 2, 3


async def set_configs(client: WireClient, group: str, **configs: str) -> None:
    answer = await client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 32, "resource_name": group, "configs": [
            {"name": k.replace("_", "."), "config_operation": 0, "value": v}
            for k, v in configs.items()]}], "validate_only": False})
    assert answer["responses"][0]["error_code"] == 0, answer


def fetch_body(group: str, member: str, epoch: int, topic_id: uuid.UUID | None,
               acks: list[tuple[int, int, list[int]]] | None = None,
               max_records: int = 100, version: int = 1) -> dict[str, Any]:
    topics = []
    if topic_id is not None:
        topics = [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                   "acknowledgement_batches": [
                       {"first_offset": a, "last_offset": b, "acknowledge_types": t}
                       for a, b, t in acks or []]}]}]
    return {"group_id": group, "member_id": member, "share_session_epoch": epoch,
            "max_wait_ms": 200, "min_bytes": 1, "max_bytes": 1 << 20,
            "max_records": max_records, "batch_size": max_records, "share_acquire_mode": 0,
            "is_renew_ack": False, "topics": topics, "forgotten_topics_data": []}


def acquired(answer: dict[str, Any]) -> list[tuple[int, int, int]]:
    assert answer["error_code"] == 0, answer
    return [(a["first_offset"], a["last_offset"], a["delivery_count"])
            for t in answer["responses"] for p in t["partitions"]
            for a in p["acquired_records"]]


async def ready_topic(stack: KafkaStack, client: WireClient, topic: str, group: str,
                      count: int) -> uuid.UUID:
    await create_topic(client, topic)
    answer = await produce(client, topic, 0, kv_batch(topic, count))
    assert answer["error_code"] == 0
    await set_configs(client, group, share_auto_offset_reset="earliest",
                      share_delivery_count_limit="2")
    return stack.topics.topics()[topic].topic_id


async def test_share_fetch_acknowledge_release_and_close(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        topic_id = await ready_topic(stack, client, "sw", "swg", 6)
        joined = await client.request(HEARTBEAT, 1, {
            "group_id": "swg", "member_id": "m1", "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": ["sw"]})
        assert joined["error_code"] == 0 and joined["member_epoch"] >= 1, joined
        assert joined["assignment"]["topic_partitions"] == [
            {"topic_id": topic_id, "partitions": [0]}]

        first = await client.request(FETCH, 2, fetch_body("swg", "m1", 0, topic_id,
                                                          max_records=4, version=2))
        assert acquired(first) == [(0, 3, 1)]
        assert first["acquisition_lock_timeout_ms"] == 30_000
        assert first["responses"][0]["partitions"][0]["records"]
        # piggybacked: accept 0-1, release 2, reject 3; then the next records
        second = await client.request(FETCH, 1, fetch_body(
            "swg", "m1", 1, topic_id, acks=[(0, 3, [ACCEPT, ACCEPT, RELEASE, REJECT])]))
        part = second["responses"][0]["partitions"][0]
        assert part["acknowledge_error_code"] == 0, part
        assert acquired(second) == [(2, 2, 2), (4, 5, 1)]
        wrong = await client.request(FETCH, 1, fetch_body("swg", "m1", 7, topic_id))
        assert wrong["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        again = await client.request(ACK, 1, {
            "group_id": "swg", "member_id": "m1", "share_session_epoch": 2, "topics": [
                {"topic_id": topic_id, "partitions": [{"partition_index": 0,
                 "acknowledgement_batches": [
                     {"first_offset": 2, "last_offset": 2, "acknowledge_types": [RELEASE]},
                     {"first_offset": 4, "last_offset": 4, "acknowledge_types": [ACCEPT]}]}]}]})
        assert again["responses"][0]["partitions"][0]["error_code"] == 0, again
        twice = await client.request(ACK, 1, {
            "group_id": "swg", "member_id": "m1", "share_session_epoch": 3, "topics": [
                {"topic_id": topic_id, "partitions": [{"partition_index": 0,
                 "acknowledgement_batches": [
                     {"first_offset": 4, "last_offset": 4, "acknowledge_types": [ACCEPT]}]}]}]})
        assert twice["responses"][0]["partitions"][0]["error_code"] == (
            ErrorCode.INVALID_RECORD_STATE)
        # closing the session releases offset 5 (still held); offset 2 hit the limit (2)
        closed = await client.request(FETCH, 1, fetch_body("swg", "m1", -1, None))
        assert closed["error_code"] == 0
        other = await client.request(FETCH, 1, fetch_body("swg", "m2", 0, topic_id))
        assert acquired(other) == [(5, 5, 2)]

        offsets = await client.request(DESCRIBE_OFFSETS, 0, {"groups": [
            {"group_id": "swg", "topics": None}]})
        [described] = offsets["groups"][0]["topics"]
        assert described["topic_name"] == "sw"
        assert described["partitions"][0]["start_offset"] == 5
        listed = await client.request(LIST_GROUPS, 5, {"states_filter": [],
                                                       "types_filter": ["share"]})
        assert [g["group_id"] for g in listed["groups"]] == ["swg"]
        desc = await client.request(DESCRIBE, 1, {"group_ids": ["swg", "nope"],
                                                  "include_authorized_operations": False})
        assert desc["groups"][0]["members"][0]["member_id"] == "m1"
        assert desc["groups"][1]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        busy = await client.request(ALTER_OFFSETS, 0, {"group_id": "swg", "topics": [
            {"topic_name": "sw", "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
        assert busy["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NON_EMPTY_GROUP
        left = await client.request(HEARTBEAT, 1, {
            "group_id": "swg", "member_id": "m1", "member_epoch": -1, "rack_id": None,
            "subscribed_topic_names": None})
        assert left["member_epoch"] == -1
        reset = await client.request(ALTER_OFFSETS, 0, {"group_id": "swg", "topics": [
            {"topic_name": "sw", "partitions": [{"partition_index": 0, "start_offset": 1}]}]})
        assert reset["responses"][0]["partitions"][0]["error_code"] == 0, reset
        third = await client.request(FETCH, 1, fetch_body("swg", "m3", 0, topic_id))
        assert acquired(third) == [(1, 5, 1)]
        deleted = await client.request(DELETE_OFFSETS, 0, {"group_id": "swg",
                                                           "topics": [{"topic_name": "sw"}]})
        assert deleted["responses"][0]["error_code"] == 0, deleted


async def test_bad_group_configs_are_refused(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        for name, value in (("share.delivery.count.limit", "1"),
                            ("share.auto.offset.reset", "by_duration:1H"),
                            ("share.auto.offset.reset", "by_duration:-PT1H"),
                            ("share.auto.offset.reset", "by_duration:PT"),
                            ("share.auto.offset.reset", "by_duration:P1Y"),
                            ("no.such.config", "1")):
            answer = await client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
                "resource_type": 32, "resource_name": "g", "configs": [
                    {"name": name, "config_operation": 0, "value": value}]}],
                "validate_only": False})
            assert answer["responses"][0]["error_code"] == ErrorCode.INVALID_CONFIG


async def test_by_duration_starts_at_the_first_record_that_young(stack: KafkaStack) -> None:
    """share.auto.offset.reset=by_duration:PT1H: a new group starts at the first record at most
    an hour old; with nothing that young it starts at the end (as latest)."""
    now_ms = int(time.time() * 1000)
    async with await stack.client() as client:
        await create_topic(client, "bd")
        for age_h, n in ((3, 2), (2, 3), (0, 4)):  # offsets 0-1, 2-4 too old; 5-8 young
            batch = build_batch([(b"k", f"v{age_h}".encode())] * n,
                                timestamp_ms=now_ms - age_h * 3_600_000)
            assert (await produce(client, "bd", 0, batch))["error_code"] == 0
        topic_id = stack.topics.topics()["bd"].topic_id
        await set_configs(client, "bdg", share_auto_offset_reset="by_duration:PT1H")
        got = await client.request(FETCH, 1, fetch_body("bdg", "m", 0, topic_id))
        assert acquired(got) == [(5, 8, 1)]
        await set_configs(client, "bdg2", share_auto_offset_reset="by_duration:PT30M")
        await produce(client, "bd", 0, build_batch([(b"k", b"old")],
                                                   timestamp_ms=now_ms - 7_200_000))
        # the records at 5-8 are younger than 30 minutes: the group starts there
        got = await client.request(FETCH, 1, fetch_body("bdg2", "m", 0, topic_id))
        assert acquired(got) == [(5, 9, 1)]
        await set_configs(client, "bdg3", share_auto_offset_reset="by_duration:PT0.5S")
        await trio.sleep(1.0)  # now every record is older than half a second
        got = await client.request(FETCH, 1, fetch_body("bdg3", "m", 0, topic_id))
        assert acquired(got) == []


async def test_records_past_the_limit_go_to_the_dead_letter_topic(stack: KafkaStack) -> None:
    """share.dead.letter.topic: a record released share.delivery.count.limit times is copied
    to the dead-letter topic (with headers naming where it came from) and archived, never
    handed out a third time; records below the limit are unaffected."""
    async with await stack.client() as client:
        topic_id = await ready_topic(stack, client, "dq", "dqg", 3)  # limit 2
        await set_configs(client, "dqg", share_dead_letter_topic="dq-dead")
        release_all = [(0, 2, [RELEASE])]
        assert acquired(await client.request(FETCH, 1, fetch_body("dqg", "m", 0, topic_id,
                                                                 max_records=3))) == [(0, 2, 1)]
        got = await client.request(FETCH, 1, fetch_body("dqg", "m", 1, topic_id,
                                                         acks=release_all))
        assert acquired(got) == [(0, 2, 2)]
        got = await client.request(FETCH, 1, fetch_body(
            "dqg", "m", 2, topic_id, acks=[(0, 0, [ACCEPT]), (1, 2, [RELEASE])]))
        assert acquired(got) == [], "past the limit: copied, archived, not handed out"
        dead = await stack.topics.partition("dq-dead", 0)
        copied = [r for b in await dead.read(0, 1 << 20) for r in decode_records(b)]
        assert [r.value for r in copied] == [b"dq-v1", b"dq-v2"]
        assert dict(copied[0].headers)["dlq.offset"] == b"1"
        assert dict(copied[1].headers)["dlq.delivery.count"] == b"3"
        assert dict(copied[1].headers)["dlq.topic"] == b"dq"
        assert stack.broker.share_groups.dead_lettered == {("dqg", "dq", 0): 2}
        offsets = await client.request(DESCRIBE_OFFSETS, 0, {"groups": [
            {"group_id": "dqg", "topics": None}]})
        assert offsets["groups"][0]["topics"][0]["partitions"][0]["start_offset"] == 3
        for bad in ("__internal", "no/slash"):
            answer = await client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
                "resource_type": 32, "resource_name": "dqg", "configs": [
                    {"name": "share.dead.letter.topic", "config_operation": 0,
                     "value": bad}]}], "validate_only": False})
            assert answer["responses"][0]["error_code"] == ErrorCode.INVALID_CONFIG


async def test_records_whose_read_fails_go_back_at_once_uncounted(
        stack: KafkaStack, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A ShareFetch whose read of the acquired records fails (a bookie down) answers the
    partition's retriable error and gives the records back at once, durably: another member
    gets them at once, at delivery 1 (Kafka acquires only what it has read, so the failed read
    costs no delivery).  Before, they stayed acquired by the first member until the lock
    (30 s) expired; one WARNING line, no traceback."""
    real_read = share_fetch._read_ranges
    failures = [BookieUnavailableError("bookies down")]

    async def failing_read(plog: Any, ranges: Any) -> list[bytes]:
        if failures:
            raise failures.pop()
        return await real_read(plog, ranges)

    monkeypatch.setattr(share_fetch, "_read_ranges", failing_read)
    async with await stack.client() as client:
        topic_id = await ready_topic(stack, client, "rf", "rfg", 4)
        with caplog.at_level(logging.INFO):
            failed = await client.request(FETCH, 1, fetch_body("rfg", "m1", 0, topic_id))
        partition = failed["responses"][0]["partitions"][0]
        assert partition["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, failed
        assert partition["acquired_records"] == []
        got = await client.request(FETCH, 1, fetch_body("rfg", "m2", 0, topic_id))
        assert acquired(got) == [(0, 3, 1)], "given back at once, the delivery uncounted"
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and warned[0].exc_info is None, warned
    assert any("given back uncounted" in r.getMessage() for r in caplog.records)


async def test_records_whose_dead_letter_copy_fails_are_copied_on_the_next_fetch(
        stack: KafkaStack, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A dead-letter copy that fails gives the records back uncounted at once: the next
    ShareFetch copies them (they are neither held until the lock expires nor archived
    uncopied, as they were when the lock ran out at the limit); one WARNING line."""
    share_groups = stack.broker.share_groups
    real_copy = share_groups.dead_letter
    failures = [BookieUnavailableError("bookies down")]

    async def failing_copy(*args: Any) -> None:
        if failures:
            raise failures.pop()
        await real_copy(*args)

    monkeypatch.setattr(share_groups, "dead_letter", failing_copy)
    async with await stack.client() as client:
        topic_id = await ready_topic(stack, client, "df", "dfg", 2)  # limit 2
        await set_configs(client, "dfg", share_dead_letter_topic="df-dead")
        assert acquired(await client.request(FETCH, 1, fetch_body(
            "dfg", "m", 0, topic_id))) == [(0, 1, 1)]
        assert acquired(await client.request(FETCH, 1, fetch_body(
            "dfg", "m", 1, topic_id, acks=[(0, 1, [RELEASE])]))) == [(0, 1, 2)]
        with caplog.at_level(logging.WARNING):
            got = await client.request(FETCH, 1, fetch_body(
                "dfg", "m", 2, topic_id, acks=[(0, 1, [RELEASE])]))
        assert acquired(got) == [] and failures == []  # the copy failed
        got = await client.request(FETCH, 1, fetch_body("dfg", "other", 0, topic_id))
        assert acquired(got) == []  # copied now, archived, not handed out
        dead = await stack.topics.partition("df-dead", 0)
        copied = [r for b in await dead.read(0, 1 << 20) for r in decode_records(b)]
        assert [r.value for r in copied] == [b"df-v0", b"df-v1"]
        assert dict(copied[0].headers)["dlq.delivery.count"] == b"3"
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.exc_info for r in warned] == [None], warned


async def test_a_broker_that_owns_neither_group_nor_partition_says_so(
    stack: KafkaStack,
) -> None:
    """Cluster mode's answers (the ownership faked): a heartbeat to a broker that does not
    coordinate the group is NOT_COORDINATOR; a fetch or acknowledgement for a partition it does
    not own is NOT_LEADER_OR_FOLLOWER at once (no long poll), naming no leader."""
    async with await stack.client() as client:
        topic_id = await ready_topic(stack, client, "nl", "nlg", 3)
        share = stack.broker.share_groups
        share._coordinates = lambda group: False
        share.delivery._owns = lambda topic, partition: False
        beat = await client.request(HEARTBEAT, 1, {
            "group_id": "nlg", "member_id": "m1", "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": ["nl"]})
        assert beat["error_code"] == ErrorCode.NOT_COORDINATOR
        body = fetch_body("nlg", "m1", 0, topic_id)
        body["max_wait_ms"] = 20_000
        started = trio.current_time()
        got = await client.request(FETCH, 1, body)
        assert trio.current_time() - started < 10
        [part] = got["responses"][0]["partitions"]
        assert part["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert part["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
        ack = await client.request(ACK, 1, {
            "group_id": "nlg", "member_id": "m1", "share_session_epoch": 1, "topics": [
                {"topic_id": topic_id, "partitions": [{"partition_index": 0,
                 "acknowledgement_batches": [
                     {"first_offset": 0, "last_offset": 0, "acknowledge_types": [ACCEPT]}]}]}]})
        assert ack["responses"][0]["partitions"][0]["error_code"] == (
            ErrorCode.NOT_LEADER_OR_FOLLOWER)
        assert share.delivery.loaded_partitions() == []


async def test_a_config_set_through_another_broker_decides_where_the_group_starts(
    stack: KafkaStack,
) -> None:
    """The group configs live in the metadata store: share.auto.offset.reset=earliest written by
    another broker (another ShareGroupConfigs on the same store) is what a new group's first
    fetch here starts by, not this broker's stale cache (which says latest)."""
    async with await stack.client() as client:
        await create_topic(client, "xb")
        assert (await produce(client, "xb", 0, kv_batch("xb", 4)))["error_code"] == 0
        topic_id = stack.topics.topics()["xb"].topic_id
        share = stack.broker.share_groups
        other_broker = ShareGroupConfigs(share.configs._store)
        await other_broker.update("xbg", lambda c: {**c, "share.auto.offset.reset": "earliest"})
        assert share.settings("xbg").auto_offset_reset == "latest", "this broker's cache is old"
        got = await client.request(FETCH, 1, fetch_body("xbg", "m", 0, topic_id))
        assert acquired(got) == [(0, 3, 1)]


def test_by_duration_values() -> None:
    assert by_duration_ms("by_duration:PT1H") == 3_600_000
    assert by_duration_ms("by_duration:P1DT2M3.5S") == 86_400_000 + 120_000 + 3_500
    assert by_duration_ms("by_duration:pt0s") == 0
    for bad in ("by_duration:", "by_duration:P", "by_duration:PT", "by_duration:P1M",
                "by_duration:PT1.S", "latest", "by_duration:PT-1S", "by_duration:P1DT"):
        assert by_duration_ms(bad) is None, bad


batch = st.tuples(st.integers(-5, 20), st.integers(-5, 20),
                  st.lists(st.integers(-2, 6), min_size=0, max_size=4))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(acks=st.lists(batch, max_size=4))
async def test_any_acknowledgement_gets_an_answer(acks: list) -> None:
    async with running_stack() as stack, await stack.client() as client:
        topic_id = await ready_topic(stack, client, "fz", "fzg", 8)
        await client.request(FETCH, 1, fetch_body("fzg", "m", 0, topic_id, max_records=5))
        answer = await client.request(FETCH, 1, fetch_body("fzg", "m", 1, topic_id, acks=acks))
        assert answer["error_code"] == 0
        code = answer["responses"][0]["partitions"][0]["acknowledge_error_code"]
        assert code in (0, ErrorCode.INVALID_RECORD_STATE, ErrorCode.INVALID_REQUEST)
