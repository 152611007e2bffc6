"""Group and offset APIs over real TCP with exact versions: the error codes clients rely on
(unknown member, stale generation, oversized metadata, stale member epoch), multi-group
OffsetFetch v8+, KIP-848 heartbeats and ListGroups/DescribeGroups of both group types."""

from __future__ import annotations

from kafka_server.conftest import KafkaStack, running_stack

from protocols.kafka.errors import ErrorCode

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, SYNC_GROUP = 8, 9, 11, 12, 14
LIST_GROUPS, DESCRIBE_GROUPS, CREATE_TOPICS = 16, 15, 19
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE, OFFSET_DELETE = 68, 69, 47
# ConsumerProtocolSubscription v0: version, topics ["t"], user data null.
SUBSCRIPTION = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"


async def make_topic(stack: KafkaStack, name: str, partitions: int) -> None:
    await stack.topics.create_topic(name, partitions)


def commit_body(group: str, member: str, epoch: int, metadata: str = "") -> dict:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": epoch,
        "member_id": member,
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 7,
                        "committed_leader_epoch": -1,
                        "committed_metadata": metadata,
                    }
                ],
            }
        ],
    }


async def test_classic_error_codes_and_multi_group_fetch() -> None:
    async with running_stack() as stack:
        await make_topic(stack, "t", 2)
        client = await stack.client()
        join = {
            "group_id": "g",
            "session_timeout_ms": 6000,
            "rebalance_timeout_ms": 6000,
            "member_id": "not-a-member",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": SUBSCRIPTION}],
            "reason": None,
        }
        answer = await client.request(JOIN_GROUP, 5, join)
        assert answer["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        answer = await client.request(JOIN_GROUP, 5, {**join, "member_id": ""})
        assert answer["error_code"] == ErrorCode.MEMBER_ID_REQUIRED  # the v4+ handshake
        member = answer["member_id"]
        answer = await client.request(JOIN_GROUP, 5, {**join, "member_id": member})
        assert answer["error_code"] == 0 and answer["generation_id"] == 1
        answer = await client.request(
            HEARTBEAT,
            3,
            {"group_id": "g", "generation_id": 0, "member_id": member, "group_instance_id": None},
        )
        assert answer["error_code"] == ErrorCode.ILLEGAL_GENERATION
        answer = await client.request(OFFSET_COMMIT, 8, commit_body("g", member, 1, "x" * 5000))
        assert (
            answer["topics"][0]["partitions"][0]["error_code"]
            == ErrorCode.OFFSET_METADATA_TOO_LARGE
        )
        answer = await client.request(OFFSET_COMMIT, 8, commit_body("g", member, 1, "meta"))
        # Between JoinGroup and SyncGroup a commit must wait for the assignment.
        assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
        answer = await client.request(
            SYNC_GROUP,
            3,
            {
                "group_id": "g",
                "generation_id": 1,
                "member_id": member,
                "group_instance_id": None,
                "assignments": [{"member_id": member, "assignment": b"a"}],
            },
        )
        assert answer["error_code"] == 0 and answer["assignment"] == b"a"
        answer = await client.request(OFFSET_COMMIT, 8, commit_body("g", member, 1, "meta"))
        assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        answer = await client.request(OFFSET_COMMIT, 8, commit_body("solo", "", -1))
        assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        answer = await client.request(
            OFFSET_FETCH,
            8,
            {
                "groups": [
                    {"group_id": "g", "topics": None},
                    {"group_id": "solo", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
                ],
                "require_stable": False,
            },
        )
        by_group = {g["group_id"]: g for g in answer["groups"]}
        assert by_group["g"]["topics"][0]["partitions"][0]["committed_offset"] == 7
        assert by_group["g"]["topics"][0]["partitions"][0]["metadata"] == "meta"
        solo = by_group["solo"]["topics"][0]["partitions"]
        assert [(p["partition_index"], p["committed_offset"]) for p in solo] == [(0, 7), (1, -1)]
        await client.aclose()


async def test_kip848_heartbeat_describe_list_and_member_epoch_commits() -> None:
    async with running_stack() as stack:
        await make_topic(stack, "t", 4)
        topic_id = stack.topics.topics()["t"].topic_id
        client = await stack.client()
        beat = {
            "group_id": "cg",
            "member_id": "",
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": ["t"],
            "server_assignor": "range",
            "topic_partitions": [],
        }
        answer = await client.request(CONSUMER_GROUP_HEARTBEAT, 0, beat)
        assert answer["error_code"] == 0 and answer["member_epoch"] == 1
        assert answer["heartbeat_interval_ms"] == 5000
        member = answer["member_id"]
        assignment = answer["assignment"]["topic_partitions"]
        assert assignment == [{"topic_id": topic_id, "partitions": [0, 1, 2, 3]}]
        bad = await client.request(
            CONSUMER_GROUP_HEARTBEAT, 0, {**beat, "member_id": member, "member_epoch": 9}
        )
        assert bad["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH

        stale = await client.request(OFFSET_COMMIT, 9, commit_body("cg", member, 0))
        assert stale["topics"][0]["partitions"][0]["error_code"] == ErrorCode.STALE_MEMBER_EPOCH
        fresh = await client.request(OFFSET_COMMIT, 9, commit_body("cg", member, 1))
        assert fresh["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        fetched = await client.request(
            OFFSET_FETCH,
            9,
            {
                "groups": [
                    {"group_id": "cg", "member_id": member, "member_epoch": 1, "topics": None}
                ],
                "require_stable": True,
            },
        )
        assert fetched["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 7

        described = await client.request(
            CONSUMER_GROUP_DESCRIBE,
            0,
            {"group_ids": ["cg", "nope"], "include_authorized_operations": False},
        )
        cg, nope = described["groups"]
        assert cg["group_state"] == "Stable" and cg["assignor_name"] == "range"
        assert cg["members"][0]["assignment"]["topic_partitions"][0]["topic_name"] == "t"
        assert nope["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        listed = await client.request(
            LIST_GROUPS, 5, {"states_filter": ["stable"], "types_filter": ["consumer"]}
        )
        assert [(g["group_id"], g["group_type"]) for g in listed["groups"]] == [("cg", "consumer")]
        left = await client.request(
            CONSUMER_GROUP_HEARTBEAT, 0, {**beat, "member_id": member, "member_epoch": -1}
        )
        assert left["error_code"] == 0 and left["member_epoch"] == -1
        listed = await client.request(LIST_GROUPS, 4, {"states_filter": ["Empty"]})
        assert [g["group_id"] for g in listed["groups"]] == ["cg"]
        await client.aclose()


async def test_offset_delete_keeps_subscribed_topics_of_live_groups() -> None:
    async with running_stack() as stack:
        await make_topic(stack, "t", 1)
        await make_topic(stack, "other", 1)
        client = await stack.client()
        join = {"group_id": "g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000,
                "member_id": "", "group_instance_id": "i", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": SUBSCRIPTION}], "reason": None}
        member = (await client.request(JOIN_GROUP, 5, join))["member_id"]
        await client.request(SYNC_GROUP, 3, {
            "group_id": "g", "generation_id": 1, "member_id": member, "group_instance_id": "i",
            "assignments": [{"member_id": member, "assignment": b""}]})
        body = commit_body("g", member, 1)
        body["topics"].append({"name": "other", "partitions": [
            {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
             "committed_metadata": None}]})
        body["group_instance_id"] = "i"
        answer = await client.request(OFFSET_COMMIT, 7, body)
        assert all(p["error_code"] == 0 for t in answer["topics"] for p in t["partitions"])
        deleted = await client.request(OFFSET_DELETE, 0, {"group_id": "g", "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}]},
            {"name": "other", "partitions": [{"partition_index": 0}]}]})
        codes = {t["name"]: t["partitions"][0]["error_code"] for t in deleted["topics"]}
        assert deleted["error_code"] == 0
        assert codes == {"t": ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, "other": 0}
        unknown = await client.request(OFFSET_DELETE, 0, {"group_id": "nobody", "topics": []})
        assert unknown["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        await client.aclose()

