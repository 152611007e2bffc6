"""Every Kafka handler driven over real TCP with the project's codec, version by version."""

from __future__ import annotations

import uuid

import trio

from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers import HANDLERS
from protocols.kafka.record_batch import Record, build_batch, decode_records, iter_batches
from tests.kafka_server.conftest import KafkaStack, running_stack
from tests.kafka_server.kafka_wire_client import WireClient

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
FIND_COORDINATOR, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 10, 18, 19, 20
INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS, CREATE_PARTITIONS = 22, 23, 32, 37


async def create_topic(client: WireClient, name: str, partitions: int = 1,
                       configs: dict[str, str] | None = None) -> dict:
    answer = await client.request(CREATE_TOPICS, 5, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout_ms": 5000, "validate_only": False})
    assert answer["topics"][0]["error_code"] == 0, answer
    return answer["topics"][0]


async def produce(client: WireClient, topic: str, partition: int, records: bytes,
                  version: int = 9, acks: int = -1) -> dict:
    answer = await client.request(PRODUCE, version, {
        "transactional_id": None, "acks": acks, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition,
                                                           "records": records}]}]})
    return answer["responses"][0]["partition_responses"][0]


def fetch_body(topic: str, offset: int, *, partition: int = 0, max_wait_ms: int = 0,
               min_bytes: int = 0, max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20,
               topic_id: uuid.UUID | None = None, session_epoch: int = -1,
               isolation_level: int = 0) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": isolation_level, "session_id": 0,
            "session_epoch": session_epoch,
            "topics": [{"topic": topic, "topic_id": topic_id or uuid.UUID(int=0),
                        "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                        "fetch_offset": offset, "last_fetched_epoch": -1,
                                        "log_start_offset": -1,
                                        "partition_max_bytes": partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def fetched_records(partition_answer: dict) -> list[Record]:
    out: list[Record] = []
    for _header, batch in iter_batches(partition_answer["records"] or b""):
        out.extend(decode_records(batch))
    return out


def kv_batch(prefix: str, count: int, compression: int = 0) -> bytes:
    return build_batch([(f"{prefix}-k{i}".encode(), f"{prefix}-v{i}".encode())
                        for i in range(count)], compression=compression)


async def test_api_versions_advertises_exactly_the_handlers(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        for version in range(0, 5):
            answer = await client.request(API_VERSIONS, version, {
                "client_software_name": "wire-test", "client_software_version": "1"})
            assert answer["error_code"] == 0
            advertised = {k["api_key"]: (k["min_version"], k["max_version"])
                          for k in answer["api_keys"]}
            assert set(advertised) == set(HANDLERS)
            assert advertised[FETCH] == (4, 16)
            assert advertised[METADATA] == (0, 12)
            assert advertised[API_VERSIONS] == (0, 4)


async def test_api_versions_of_an_unknown_version_answers_v0(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        # Hand-made v99 request: header v1 layout (key, version, correlation id, client id).
        request = (18).to_bytes(2, "big") + (99).to_bytes(2, "big") + (7).to_bytes(4, "big")
        request += (4).to_bytes(2, "big") + b"test"
        await client.send_raw(len(request).to_bytes(4, "big") + request)
        frame = await client.receive_frame()
        from protocols.kafka.codec import decode_response
        correlation_id, answer = decode_response(API_VERSIONS, 0, frame)
        assert correlation_id == 7
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert {k["api_key"] for k in answer["api_keys"]} == set(HANDLERS)
        # The connection stays usable.
        assert (await client.request(API_VERSIONS, 3, {"client_software_name": "x",
                                                       "client_software_version": "1"})
                )["error_code"] == 0


async def test_metadata_auto_creates_and_describes_partitions(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        for version in (1, 4, 9, 12):
            name = f"auto-{version}"
            body = {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                    "allow_auto_topic_creation": True,
                    "include_topic_authorized_operations": False,
                    "include_cluster_authorized_operations": False}
            answer = await client.request(METADATA, version, body)
            assert answer["brokers"][0]["node_id"] == 1
            assert answer["brokers"][0]["port"] == stack.port
            [topic] = answer["topics"]
            assert topic["error_code"] == 0 and topic["name"] == name
            [partition] = topic["partitions"]
            assert partition["leader_id"] == 1
            assert partition["replica_nodes"] == [1] and partition["isr_nodes"] == [1]
            if version >= 2:
                assert answer["cluster_id"] == "test-cluster"
            if version >= 7:
                assert partition["leader_epoch"] == 0
            if version >= 10:
                assert topic["topic_id"] == stack.topics.topics()[name].topic_id
        # v0: an empty list means every topic
        answer = await client.request(METADATA, 0, {"topics": []})
        assert {t["name"] for t in answer["topics"]} >= {"auto-1", "auto-4", "auto-9", "auto-12"}
        # v1+: null means every topic, empty means none
        assert len((await client.request(METADATA, 1, {"topics": None}))["topics"]) == 4
        assert (await client.request(METADATA, 1, {"topics": []}))["topics"] == []


async def test_metadata_without_auto_creation_and_bad_names(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        answer = await client.request(METADATA, 8, {
            "topics": [{"name": "absent"}, {"name": "bad/name"}],
            "allow_auto_topic_creation": False})
        codes = {t["name"]: t["error_code"] for t in answer["topics"]}
        assert codes == {"absent": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         "bad/name": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        answer = await client.request(METADATA, 8, {"topics": [{"name": "bad/name"}],
                                                    "allow_auto_topic_creation": True})
        assert answer["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        # by topic id (v10+)
        await create_topic(client, "by-id")
        topic_id = stack.topics.topics()["by-id"].topic_id
        answer = await client.request(METADATA, 12, {
            "topics": [{"name": None, "topic_id": topic_id},
                       {"name": None, "topic_id": uuid.uuid4()}],
            "allow_auto_topic_creation": False})
        assert answer["topics"][0]["name"] == "by-id"
        assert answer["topics"][1]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID


async def test_metadata_auto_creation_disabled_by_the_broker() -> None:
    async with running_stack(auto_create_topics=False) as stack:
        async with await stack.client() as client:
            answer = await client.request(METADATA, 4, {"topics": [{"name": "nope"}],
                                                        "allow_auto_topic_creation": True})
            assert answer["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert "nope" not in stack.topics.topics()


async def test_produce_and_fetch_across_versions(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "pf", partitions=2)
        topic_id = stack.topics.topics()["pf"].topic_id
        offset = 0
        for version in (3, 5, 8, 9, 11):
            answer = await produce(client, "pf", 1, kv_batch(f"p{version}", 5), version=version)
            assert answer["error_code"] == 0, answer
            assert answer["base_offset"] == offset
            if version >= 5:
                assert answer["log_start_offset"] == 0
            offset += 5
        for version in (4, 7, 11, 12, 13, 16):
            answer = await client.request(FETCH, version, fetch_body(
                "pf", 0, partition=1, topic_id=topic_id))
            [topic] = answer["responses"]
            if version >= 13:
                assert topic["topic_id"] == topic_id
            else:
                assert topic["topic"] == "pf"
            [part] = topic["partitions"]
            assert part["error_code"] == 0
            assert part["high_watermark"] == offset
            assert part["last_stable_offset"] == offset
            records = fetched_records(part)
            assert [r.offset for r in records] == list(range(offset))
            assert records[0].key == b"p3-k0" and records[-1].value == b"p11-v4"
            if version >= 7:
                assert answer["session_id"] == 0 and answer["error_code"] == 0
        # partition 0 is empty; fetching at the high watermark is not an error
        answer = await client.request(FETCH, 11, fetch_body("pf", 0, partition=0))
        part = answer["responses"][0]["partitions"][0]
        assert part["error_code"] == 0 and fetched_records(part) == []


async def test_fetch_errors_and_sessions(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "fe")
        await produce(client, "fe", 0, kv_batch("a", 3))
        part = (await client.request(FETCH, 11, fetch_body("fe", 10)))["responses"][0][
            "partitions"][0]
        assert part["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        part = (await client.request(FETCH, 11, fetch_body("fe", 0, partition=5)))[
            "responses"][0]["partitions"][0]
        assert part["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        part = (await client.request(FETCH, 13, fetch_body("x", 0, topic_id=uuid.uuid4())))[
            "responses"][0]["partitions"][0]
        assert part["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
        answer = await client.request(FETCH, 11, fetch_body("fe", 0, session_epoch=1))
        assert answer["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        # A version below what the handler implements (the codec knows v0-v3) is answered with
        # UNSUPPORTED_VERSION in the client's own layout.
        answer = await client.request(FETCH, 3, fetch_body("fe", 0))
        part = answer["responses"][0]["partitions"][0]
        assert part["error_code"] == ErrorCode.UNSUPPORTED_VERSION


async def test_fetch_limits_return_the_first_batch_whole(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "big")
        big = build_batch([(b"k", b"x" * 5000)])
        for _ in range(3):
            assert (await produce(client, "big", 0, big))["error_code"] == 0
        part = (await client.request(FETCH, 11, fetch_body("big", 0, max_bytes=100,
                                                           partition_max_bytes=100)))[
            "responses"][0]["partitions"][0]
        assert [r.offset for r in fetched_records(part)] == [0]
        part = (await client.request(FETCH, 11, fetch_body("big", 0, max_bytes=2 * len(big),
                                                           partition_max_bytes=1 << 20)))[
            "responses"][0]["partitions"][0]
        assert [r.offset for r in fetched_records(part)] == [0, 1]


async def test_fetch_long_poll_wakes_on_new_data(stack: KafkaStack) -> None:
    async with await stack.client() as consumer, await stack.client() as producer:
        await create_topic(consumer, "lp")
        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            async def produce_later() -> None:
                await trio.sleep(0.3)
                await produce(producer, "lp", 0, kv_batch("late", 1))
            nursery.start_soon(produce_later)
            answer = await consumer.request(FETCH, 12, fetch_body("lp", 0, max_wait_ms=10_000,
                                                                  min_bytes=1))
        elapsed = trio.current_time() - started
        part = answer["responses"][0]["partitions"][0]
        assert [r.key for r in fetched_records(part)] == [b"late-k0"]
        assert 0.25 < elapsed < 5.0
        # Nothing arrives: the wait ends at max_wait_ms with an empty answer.
        started = trio.current_time()
        answer = await consumer.request(FETCH, 12, fetch_body("lp", 1, max_wait_ms=300,
                                                              min_bytes=1))
        assert 0.25 < trio.current_time() - started < 3.0
        assert fetched_records(answer["responses"][0]["partitions"][0]) == []


async def test_list_offsets(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "lo")
        for i in range(3):
            batch = build_batch([(b"k", b"v"), (b"k", b"v")], timestamp_ms=1_000_000 + i * 1000)
            await produce(client, "lo", 0, batch)

        async def lookup(version: int, ts: int) -> dict:
            answer = await client.request(LIST_OFFSETS, version, {
                "replica_id": -1, "isolation_level": 0, "timeout_ms": 1000,
                "topics": [{"name": "lo", "partitions": [{"partition_index": 0,
                                                          "current_leader_epoch": -1,
                                                          "timestamp": ts,
                                                          "max_num_offsets": 1}]}]})
            return answer["topics"][0]["partitions"][0]

        for version in (1, 4, 7, 9):
            assert (await lookup(version, -2))["offset"] == 0
            assert (await lookup(version, -1))["offset"] == 6
            assert (await lookup(version, 1_001_000))["offset"] == 2
            assert (await lookup(version, 1_001_500))["offset"] == 4
            assert (await lookup(version, 9_000_000))["offset"] == -1
        found = await lookup(7, -3)
        assert found["timestamp"] == 1_002_000 and found["offset"] in (4, 5)
        assert (await lookup(0, -1))["old_style_offsets"] == [6]
        assert (await lookup(0, -2))["old_style_offsets"] == [0]
        missing = await client.request(LIST_OFFSETS, 5, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": "nope", "partitions": [{"partition_index": 0,
                                                        "timestamp": -1}]}]})
        assert missing["topics"][0]["partitions"][0]["error_code"] == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_create_topics(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        def topic(name: str, partitions: int = 3, rf: int = -1,
                  configs: dict[str, str] | None = None) -> dict:
            return {"name": name, "num_partitions": partitions, "replication_factor": rf,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}

        answer = await client.request(CREATE_TOPICS, 7, {"topics": [
            topic("ct-a", configs={"retention.ms": "1000"}), topic("ct-b", -1, 3),
            topic("ct-dup"), topic("ct-dup"), topic("bad name"), topic("ct-zero", 0),
            topic("ct-badcfg", configs={"no.such.config": "1"}), topic("ct-rf", rf=0)],
            "timeout_ms": 1000, "validate_only": False})
        results = {t["name"]: t for t in answer["topics"]}
        assert results["ct-a"]["error_code"] == 0
        assert results["ct-a"]["num_partitions"] == 3
        assert results["ct-a"]["topic_id"] == stack.topics.topics()["ct-a"].topic_id
        configs = {c["name"]: c for c in results["ct-a"]["configs"]}
        assert configs["retention.ms"]["value"] == "1000"
        assert configs["retention.ms"]["config_source"] == 1
        assert configs["cleanup.policy"]["value"] == "delete"
        assert results["ct-b"]["num_partitions"] == 1  # the broker default
        assert results["ct-dup"]["error_code"] == ErrorCode.INVALID_REQUEST
        assert results["bad name"]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert results["ct-zero"]["error_code"] == ErrorCode.INVALID_PARTITIONS
        assert results["ct-badcfg"]["error_code"] == ErrorCode.INVALID_CONFIG
        assert results["ct-rf"]["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR
        assert set(stack.topics.topics()) == {"ct-a", "ct-b"}
        answer = await client.request(CREATE_TOPICS, 2, {"topics": [topic("ct-a")],
                                                         "timeout_ms": 1000,
                                                         "validate_only": False})
        assert answer["topics"][0]["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
        answer = await client.request(CREATE_TOPICS, 4, {"topics": [topic("ct-v")],
                                                         "timeout_ms": 1000,
                                                         "validate_only": True})
        assert answer["topics"][0]["error_code"] == 0
        assert "ct-v" not in stack.topics.topics()


async def test_delete_topics_by_name_and_id(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        for name in ("d1", "d2", "d3"):
            await create_topic(client, name)
        answer = await client.request(DELETE_TOPICS, 4, {"topic_names": ["d1", "nope"],
                                                         "timeout_ms": 1000})
        codes = {r["name"]: r["error_code"] for r in answer["responses"]}
        assert codes == {"d1": 0, "nope": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        d2_id = stack.topics.topics()["d2"].topic_id
        answer = await client.request(DELETE_TOPICS, 6, {
            "topics": [{"name": None, "topic_id": d2_id}, {"name": "d3",
                                                           "topic_id": uuid.UUID(int=0)},
                       {"name": None, "topic_id": uuid.uuid4()}], "timeout_ms": 1000})
        results = answer["responses"]
        assert results[0]["name"] == "d2" and results[0]["error_code"] == 0
        assert results[1]["error_code"] == 0
        assert results[2]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID
        assert stack.topics.topics() == {}


async def test_create_partitions(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "cp", partitions=2)
        answer = await client.request(CREATE_PARTITIONS, 3, {
            "topics": [{"name": "cp", "count": 4, "assignments": None},
                       {"name": "nope", "count": 4, "assignments": None}],
            "timeout_ms": 1000, "validate_only": False})
        codes = [r["error_code"] for r in answer["results"]]
        assert codes == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert stack.topics.topics()["cp"].partitions == 4
        answer = await client.request(CREATE_PARTITIONS, 1, {
            "topics": [{"name": "cp", "count": 3, "assignments": None}],
            "timeout_ms": 1000, "validate_only": False})
        assert answer["results"][0]["error_code"] == ErrorCode.INVALID_PARTITIONS
        assert (await produce(client, "cp", 3, kv_batch("new", 1)))["error_code"] == 0


async def test_init_producer_id(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        ids = set()
        for version in (0, 2, 4):
            answer = await client.request(INIT_PRODUCER_ID, version, {
                "transactional_id": None, "transaction_timeout_ms": 60000,
                "producer_id": -1, "producer_epoch": -1})
            assert answer["error_code"] == 0 and answer["producer_epoch"] == 0
            ids.add(answer["producer_id"])
        assert len(ids) == 3 and min(ids) >= 0
        answer = await client.request(INIT_PRODUCER_ID, 4, {
            "transactional_id": "txn", "transaction_timeout_ms": 60000,
            "producer_id": -1, "producer_epoch": -1})
        # A transactional id is served by the transaction coordinator: first epoch 0.
        assert answer["error_code"] == 0 and answer["producer_epoch"] == 0


async def test_describe_configs(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "dc", configs={"message.timestamp.type": "LogAppendTime"})
        for version in (0, 1, 3, 4):
            answer = await client.request(DESCRIBE_CONFIGS, version, {
                "resources": [
                    {"resource_type": 2, "resource_name": "dc", "configuration_keys": None},
                    {"resource_type": 2, "resource_name": "dc",
                     "configuration_keys": ["retention.ms"]},
                    {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
                    {"resource_type": 2, "resource_name": "nope", "configuration_keys": None}],
                "include_synonyms": True, "include_documentation": True})
            full, only, broker, missing = answer["results"]
            configs = {c["name"]: c for c in full["configs"]}
            assert configs["message.timestamp.type"]["value"] == "LogAppendTime"
            assert configs["retention.ms"]["value"] == str(7 * 24 * 3600 * 1000)
            assert {"cleanup.policy", "max.message.bytes", "segment.bytes", "compression.type",
                    "min.insync.replicas", "retention.bytes"} <= set(configs)
            if version >= 1:
                assert configs["message.timestamp.type"]["config_source"] == 1
                assert configs["retention.ms"]["config_source"] == 5
            else:
                assert configs["retention.ms"]["is_default"]
            assert [c["name"] for c in only["configs"]] == ["retention.ms"]
            broker_configs = {c["name"]: c["value"] for c in broker["configs"]}
            assert broker_configs["broker.id"] == "1"
            assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_log_append_time_topics_stamp_the_broker_clock(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "lat", configs={"message.timestamp.type": "LogAppendTime"})
        answer = await produce(client, "lat", 0, build_batch([(b"k", b"v")], timestamp_ms=5))
        assert answer["error_code"] == 0 and answer["log_append_time_ms"] > 1_600_000_000_000
        part = (await client.request(FETCH, 11, fetch_body("lat", 0)))["responses"][0][
            "partitions"][0]
        assert fetched_records(part)[0].timestamp == answer["log_append_time_ms"]


async def test_offset_for_leader_epoch_and_find_coordinator(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "ep")
        await produce(client, "ep", 0, kv_batch("x", 4))
        for version in (0, 2, 3, 4):
            answer = await client.request(OFFSET_FOR_LEADER_EPOCH, version, {
                "replica_id": -1, "topics": [{"topic": "ep", "partitions": [
                    {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
                    {"partition": 9, "current_leader_epoch": 0, "leader_epoch": 0}]}]})
            ok, missing = answer["topics"][0]["partitions"]
            assert ok["error_code"] == 0 and ok["end_offset"] == 4
            if version >= 1:
                assert ok["leader_epoch"] == 0
            assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for version in (0, 1, 3):
            answer = await client.request(FIND_COORDINATOR, version, {"key": "g",
                                                                      "key_type": 0})
            assert (answer["error_code"], answer["node_id"], answer["port"]) == \
                (0, 1, stack.port)
        answer = await client.request(FIND_COORDINATOR, 4, {"key_type": 0,
                                                            "coordinator_keys": ["a", "b"]})
        assert [c["key"] for c in answer["coordinators"]] == ["a", "b"]
        assert all(c["node_id"] == 1 and c["host"] == "127.0.0.1"
                   for c in answer["coordinators"])


async def test_produce_errors_per_partition(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "pe")
        corrupt = bytearray(kv_batch("c", 2))
        corrupt[-1] ^= 0xFF  # CRC no longer matches
        answer = await client.request(PRODUCE, 9, {
            "transactional_id": None, "acks": 1, "timeout_ms": 1000,
            "topic_data": [
                {"name": "pe", "partition_data": [{"index": 0, "records": bytes(corrupt)},
                                                  {"index": 7, "records": kv_batch("u", 1)}]},
                {"name": "nope", "partition_data": [{"index": 0, "records": kv_batch("n", 1)}]},
            ]})
        pe, nope = answer["responses"]
        assert pe["partition_responses"][0]["error_code"] == ErrorCode.CORRUPT_MESSAGE
        assert pe["partition_responses"][1]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert nope["partition_responses"][0]["error_code"] == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        answer = await client.request(PRODUCE, 9, {
            "transactional_id": None, "acks": 2, "timeout_ms": 1000,
            "topic_data": [{"name": "pe", "partition_data": [{"index": 0,
                                                              "records": kv_batch("a", 1)}]}]})
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == \
            ErrorCode.INVALID_REQUIRED_ACKS
        # the good path still works and nothing corrupt was stored
        assert (await produce(client, "pe", 0, kv_batch("ok", 1)))["base_offset"] == 0


async def test_legacy_message_sets_are_converted(stack: KafkaStack) -> None:
    import struct
    import zlib
    async with await stack.client() as client:
        await create_topic(client, "legacy")
        messages = b""
        for i in range(3):
            key, value = f"k{i}".encode(), f"v{i}".encode()
            body = struct.pack(">bbq", 1, 0, 1_000 + i)  # magic 1, attributes, timestamp
            body += struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
            message = struct.pack(">I", zlib.crc32(body)) + body
            messages += struct.pack(">qi", i, len(message)) + message
        answer = await produce(client, "legacy", 0, messages, version=2)
        assert answer["error_code"] == 0 and answer["base_offset"] == 0
        part = (await client.request(FETCH, 11, fetch_body("legacy", 0)))["responses"][0][
            "partitions"][0]
        records = fetched_records(part)
        assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
            (i, f"k{i}".encode(), f"v{i}".encode(), 1_000 + i) for i in range(3)]
