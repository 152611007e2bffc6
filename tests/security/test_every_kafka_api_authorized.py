"""Every Kafka API that Kafka's KafkaApis authorizes refuses a principal without ACLs.

A real `ledgerwire standalone` with SASL and ACLs on.  The super user `admin` makes a topic
with a record, a classic group with a committed offset, a KIP-848 group and a transactional
id; `mallory`, logged in but granted nothing of theirs, then sends one request per API the
broker advertises (walking its ApiVersions answer, so an API added without an authorization
decision fails here) and must get exactly the authorization error Kafka answers, with no data.
APIs Kafka serves to anyone are listed with the reason.  Afterwards the admin sees everything
unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from protocols.kafka.acl_model import (
    OP_DESCRIBE,
    OP_READ,
    PAT_LITERAL,
    PAT_PREFIXED,
    PERM_ALLOW,
    RES_GROUP,
)
from protocols.kafka.errors import ErrorCode
from protocols.kafka.record_batch import build_batch
from tests.kafka_server.kafka_wire_client import WireClient
from tests.support.secured_standalone import login, running, secured_standalone
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
CLUSTER_DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
TXN_DENIED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

SECRET, GROUP, GROUP_848, TXN = "secret", "victims", "victims-848", "victim-tx"

# Kafka answers these without asking the authorizer (KafkaApis): login and version discovery.
NOT_AUTHORIZED_BY_KAFKA = {
    17: "SaslHandshake: before login",
    18: "ApiVersions: before login",
    36: "SaslAuthenticate: the login itself",
}


def refusals(answer: Any) -> set[int]:
    """Every non-zero *error_code in the answer, at any depth."""
    found: set[int] = set()
    if isinstance(answer, dict):
        for key, value in answer.items():
            if key.endswith("error_code") and isinstance(value, int) and value:
                found.add(value)
            else:
                found |= refusals(value)
    elif isinstance(answer, list):
        for item in answer:
            found |= refusals(item)
    return found


def partition_offsets(offset: int) -> list[dict[str, Any]]:
    return [{"name": SECRET, "partitions": [{"partition_index": 0, "committed_offset": offset}]}]


Check = Callable[[dict[str, Any]], None]


def refused(code: int) -> Check:
    def check(answer: dict[str, Any]) -> None:
        assert refusals(answer) == {code}, answer
    return check


def no_data_fetch(answer: dict[str, Any]) -> None:
    refused(TOPIC_DENIED)(answer)
    part = answer["responses"][0]["partitions"][0]
    assert not part["records"] and part["high_watermark"] == -1, part


def no_end_offset(answer: dict[str, Any]) -> None:
    refused(TOPIC_DENIED)(answer)
    assert all(p["end_offset"] == -1 for t in answer["topics"] for p in t["partitions"]), answer


def victims_not_listed(answer: dict[str, Any]) -> None:
    assert answer["error_code"] == 0
    assert GROUP not in {g["group_id"] for g in answer["groups"]}, answer


def no_cluster_operations(answer: dict[str, Any]) -> None:
    """Kafka answers DescribeCluster to anyone but shows no authorized operations."""
    assert answer["error_code"] == 0 and answer["brokers"], answer
    assert answer["cluster_authorized_operations"] == 0, answer


def no_log_dirs(answer: dict[str, Any]) -> None:
    assert answer["error_code"] == CLUSTER_DENIED and answer["results"] == [], answer


# admin's delegation token (made in prepare_victims): mallory may not renew, expire or see it
ADMIN_TOKEN: dict[str, Any] = {}


def admin_token_hidden(answer: dict[str, Any]) -> None:
    assert answer["error_code"] == 0, answer
    assert ADMIN_TOKEN["token_id"] not in {t["token_id"] for t in answer["tokens"]}, answer


def txn_not_listed(answer: dict[str, Any]) -> None:
    """Kafka lists only the transactional ids the caller may describe."""
    assert answer["error_code"] == 0, answer
    assert TXN not in {t["transactional_id"] for t in answer["transaction_states"]}, answer


# api key -> [(version, body, check)], all sent by mallory (a callable body is built when sent).
PROBES: dict[int, list[tuple[int, Any, Check]]] = {
    0: [(9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": SECRET, "partition_data": [
            {"index": 0, "records": build_batch([(b"k", b"forged")])}]}]}, refused(TOPIC_DENIED)),
        (9, {"transactional_id": TXN, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": SECRET, "partition_data": [
                {"index": 0, "records": build_batch([(b"k", b"forged")])}]}]},
         refused(TXN_DENIED))],
    1: [(12, {"max_wait_ms": 0, "topics": [{"topic": SECRET, "partitions": [
        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]},
        no_data_fetch)],
    2: [(7, {"topics": [{"name": SECRET, "partitions": [{"partition_index": 0,
                                                          "timestamp": -1}]}]},
         refused(TOPIC_DENIED))],
    3: [(12, {"topics": [{"name": SECRET}], "allow_auto_topic_creation": False},
         refused(TOPIC_DENIED)),
        (12, {"topics": [{"name": "mallory-made"}], "allow_auto_topic_creation": True},
         refused(TOPIC_DENIED)),
        (12, {"topics": None}, lambda a: (
            None if all(t["name"] != SECRET for t in a["topics"]) else pytest.fail(str(a))))],
    8: [(8, {"group_id": GROUP, "generation_id_or_member_epoch": -1,
             "topics": partition_offsets(0)}, refused(GROUP_DENIED)),
        (8, {"group_id": "mallory-own", "generation_id_or_member_epoch": -1,
             "topics": partition_offsets(0)}, refused(TOPIC_DENIED))],
    9: [(7, {"group_id": GROUP, "topics": None}, refused(GROUP_DENIED)),
        (1, {"group_id": GROUP, "topics": [{"name": SECRET, "partition_indexes": [0]}]},
         refused(GROUP_DENIED)),
        (8, {"groups": [{"group_id": GROUP, "topics": None}]}, refused(GROUP_DENIED)),
        (7, {"group_id": "mallory-own", "topics": [{"name": SECRET, "partition_indexes": [0]}]},
         refused(TOPIC_DENIED))],
    10: [(4, {"key_type": 0, "coordinator_keys": [GROUP]}, refused(GROUP_DENIED)),
         (4, {"key_type": 1, "coordinator_keys": [TXN]}, refused(TXN_DENIED))],
    11: [(5, {"group_id": GROUP, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
              "member_id": "", "protocol_type": "consumer",
              "protocols": [{"name": "range", "metadata": b""}]}, refused(GROUP_DENIED))],
    12: [(4, {"group_id": GROUP, "generation_id": 1, "member_id": "m"}, refused(GROUP_DENIED))],
    13: [(4, {"group_id": GROUP, "members": [{"member_id": "m"}]}, refused(GROUP_DENIED))],
    14: [(5, {"group_id": GROUP, "generation_id": 1, "member_id": "m",
              "protocol_type": "consumer", "protocol_name": "range", "assignments": []},
          refused(GROUP_DENIED))],
    15: [(5, {"groups": [GROUP, GROUP_848]}, refused(GROUP_DENIED))],
    16: [(4, {}, victims_not_listed)],
    19: [(5, {"topics": [{"name": "mallory-made", "num_partitions": 1,
                          "replication_factor": 1}]}, refused(TOPIC_DENIED))],
    20: [(5, {"topic_names": [SECRET, "no-such-topic"]}, refused(TOPIC_DENIED))],
    21: [(2, {"topics": [{"name": SECRET, "partitions": [{"partition_index": 0,
                                                          "offset": 1}]}]},
          refused(TOPIC_DENIED))],
    22: [(4, {"transactional_id": TXN, "transaction_timeout_ms": 60000},
          refused(TXN_DENIED)),
         (4, {"transactional_id": None, "transaction_timeout_ms": 60000},
          refused(CLUSTER_DENIED))],
    23: [(4, {"replica_id": -1, "topics": [
        {"topic": name, "partitions": [{"partition": 0, "current_leader_epoch": 0,
                                        "leader_epoch": 0}]}
        for name in (SECRET, "no-such-topic")]}, no_end_offset)],
    24: [(3, {"v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": 1,
              "v3_and_below_producer_epoch": 0,
              "v3_and_below_topics": [{"name": SECRET, "partitions": [0]}]},
          refused(TXN_DENIED)),
         (4, {"transactions": [{"transactional_id": TXN, "producer_id": 1, "producer_epoch": 0,
                                "verify_only": True,
                                "topics": [{"name": SECRET, "partitions": [0]}]}]},
          refused(CLUSTER_DENIED))],
    25: [(3, {"transactional_id": TXN, "producer_id": 1, "producer_epoch": 0,
              "group_id": GROUP}, refused(TXN_DENIED))],
    26: [(3, {"transactional_id": TXN, "producer_id": 1, "producer_epoch": 0,
              "committed": False}, refused(TXN_DENIED))],
    27: [(1, {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": False,
                           "topics": [{"name": SECRET, "partition_indexes": [0]}],
                           "coordinator_epoch": 0}]}, refused(CLUSTER_DENIED))],
    28: [(3, {"transactional_id": TXN, "group_id": GROUP, "producer_id": 1,
              "producer_epoch": 0, "topics": partition_offsets(0)}, refused(TXN_DENIED))],
    29: [(3, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
              "permission_type": 1}, refused(CLUSTER_DENIED))],
    30: [(3, {"creations": [{"resource_type": 2, "resource_name": SECRET,
                             "resource_pattern_type": PAT_LITERAL, "principal": "User:mallory",
                             "host": "*", "operation": 2, "permission_type": PERM_ALLOW}]},
          refused(CLUSTER_DENIED))],
    31: [(3, {"filters": [{"resource_type_filter": 1, "pattern_type_filter": 1,
                           "operation": 1, "permission_type": 1}]}, refused(CLUSTER_DENIED))],
    32: [(4, {"resources": [{"resource_type": 2, "resource_name": SECRET,
                             "configuration_keys": None}]}, refused(TOPIC_DENIED)),
         (4, {"resources": [{"resource_type": 4, "resource_name": "",
                             "configuration_keys": None}]}, refused(CLUSTER_DENIED))],
    33: [(2, {"resources": [{"resource_type": 2, "resource_name": SECRET, "configs": [
        {"name": "retention.ms", "value": "1"}]}]}, refused(TOPIC_DENIED))],
    37: [(3, {"topics": [{"name": SECRET, "count": 3, "assignments": None}],
              "timeout_ms": 5000}, refused(TOPIC_DENIED))],
    # KIP-48 delegation tokens: a token for another owner needs CREATE_TOKENS on that user;
    # renew/expire only by owner and renewers; describe shows only one's own
    38: [(3, {"owner_principal_type": "User", "owner_principal_name": "admin", "renewers": [],
              "max_lifetime_ms": -1},
          refused(int(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED)))],
    39: [(2, lambda: {"hmac": ADMIN_TOKEN["hmac"], "renew_period_ms": -1},
          refused(int(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)))],
    40: [(2, lambda: {"hmac": ADMIN_TOKEN["hmac"], "expiry_time_period_ms": -1},
          refused(int(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)))],
    41: [(3, {"owners": None}, admin_token_hidden)],
    42: [(2, {"groups_names": [GROUP]}, refused(GROUP_DENIED))],
    44: [(1, {"resources": [{"resource_type": 2, "resource_name": SECRET, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "1"}]}]},
         refused(TOPIC_DENIED))],
    47: [(0, {"group_id": GROUP, "topics": [{"name": SECRET,
                                             "partitions": [{"partition_index": 0}]}]},
          refused(GROUP_DENIED))],
    35: [(4, {"topics": None}, no_log_dirs)],
    43: [(2, {"election_type": 0, "topic_partitions": [{"topic": SECRET, "partitions": [0]}],
              "timeout_ms": 5000}, refused(CLUSTER_DENIED))],
    48: [(1, {"components": [], "strict": False}, refused(CLUSTER_DENIED))],
    49: [(1, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "mallory"}],
                           "ops": [{"key": "producer_byte_rate", "value": 1e12,
                                    "remove": False}]}], "validate_only": False},
          refused(CLUSTER_DENIED))],
    50: [(0, {"users": None}, refused(CLUSTER_DENIED))],
    51: [(0, {"deletions": [{"name": "admin", "mechanism": 2}], "upsertions": []},
          refused(CLUSTER_DENIED))],
    60: [(1, {"include_cluster_authorized_operations": True}, no_cluster_operations)],
    61: [(0, {"topics": [{"name": SECRET, "partition_indexes": [0]}]}, refused(TOPIC_DENIED))],
    65: [(0, {"transactional_ids": [TXN]}, refused(TXN_DENIED))],
    66: [(1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1},
          txn_not_listed)],
    68: [(0, {"group_id": GROUP_848, "member_id": "", "member_epoch": 0,
              "rebalance_timeout_ms": 30000, "subscribed_topic_names": [SECRET],
              "topic_partitions": []}, refused(GROUP_DENIED)),
         (0, {"group_id": "mallory-848", "member_id": "", "member_epoch": 0,
              "rebalance_timeout_ms": 30000, "subscribed_topic_names": [SECRET],
              "topic_partitions": []}, refused(TOPIC_DENIED))],
    69: [(0, {"group_ids": [GROUP]}, refused(GROUP_DENIED)),
         (0, {"group_ids": [GROUP_848]}, refused(TOPIC_DENIED))],
    # KIP-932 share groups
    76: [(1, {"group_id": GROUP, "member_id": "m1", "member_epoch": 0, "rack_id": None,
              "subscribed_topic_names": [SECRET]}, refused(GROUP_DENIED)),
         (1, {"group_id": "mallory-share", "member_id": "m1", "member_epoch": 0,
              "rack_id": None, "subscribed_topic_names": [SECRET]}, refused(TOPIC_DENIED))],
    77: [(1, {"group_ids": [GROUP], "include_authorized_operations": False},
          refused(GROUP_DENIED))],
    78: [(1, {"group_id": GROUP, "member_id": "m1", "share_session_epoch": 0, "max_wait_ms": 0,
              "min_bytes": 1, "max_bytes": 1000, "max_records": 10, "batch_size": 10,
              "topics": [], "forgotten_topics_data": []}, refused(GROUP_DENIED))],
    79: [(1, {"group_id": GROUP, "member_id": "m1", "share_session_epoch": 1, "topics": []},
          refused(GROUP_DENIED))],
    90: [(0, {"groups": [{"group_id": GROUP, "topics": None}]}, refused(GROUP_DENIED))],
    91: [(0, {"group_id": GROUP, "topics": [{"topic_name": SECRET, "partitions": [
        {"partition_index": 0, "start_offset": 0}]}]}, refused(GROUP_DENIED)),
         (0, {"group_id": "mallory-share", "topics": [{"topic_name": SECRET, "partitions": [
             {"partition_index": 0, "start_offset": 0}]}]}, refused(TOPIC_DENIED))],
    92: [(0, {"group_id": GROUP, "topics": [{"topic_name": SECRET}]}, refused(GROUP_DENIED))],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    with running(secured_standalone(
            tmp_path_factory.mktemp("every-api"),
            extra='delegation_token_secret_key = "every-api-token-key-0123"')) as standalone:
        yield standalone


async def prepare_victims(admin: WireClient) -> None:
    made = await admin.request(19, 5, {"topics": [
        {"name": SECRET, "num_partitions": 1, "replication_factor": 1}]})
    assert refusals(made) == set(), made
    sent = await admin.request(0, 9, {"acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": SECRET, "partition_data": [
            {"index": 0, "records": build_batch([(b"k", b"private")])}]}]})
    assert refusals(sent) == set(), sent
    committed = await admin.request(8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1,
                                           "topics": partition_offsets(1)})
    assert refusals(committed) == set(), committed
    joined = await admin.request(68, 0, {
        "group_id": GROUP_848, "member_id": "", "member_epoch": 0,
        "rebalance_timeout_ms": 30000, "subscribed_topic_names": [SECRET],
        "topic_partitions": []})
    assert joined["error_code"] == 0, joined
    txn = await admin.request(22, 4, {"transactional_id": TXN, "transaction_timeout_ms": 60000})
    assert txn["error_code"] == 0, txn
    # mallory's own groups, and the right to describe the KIP-848 group but not its topic
    grants = [(RES_GROUP, "mallory-", PAT_PREFIXED, OP_READ),
              (RES_GROUP, GROUP_848, PAT_LITERAL, OP_DESCRIBE)]
    acls = await admin.request(30, 3, {"creations": [
        {"resource_type": rt, "resource_name": name, "resource_pattern_type": pt,
         "principal": "User:mallory", "host": "*", "operation": op,
         "permission_type": PERM_ALLOW} for rt, name, pt, op in grants]})
    assert refusals(acls) == set(), acls
    token = await admin.request(38, 3, {"owner_principal_type": None,
                                        "owner_principal_name": None, "renewers": [],
                                        "max_lifetime_ms": -1})
    assert token["error_code"] == 0, token
    ADMIN_TOKEN.update(token_id=token["token_id"], hmac=token["hmac"])


async def test_unprivileged_principal_refused_on_every_authorized_api(server: Standalone) -> None:
    admin = await login(server.kafka_port, "admin")
    mallory = await login(server.kafka_port, "mallory")
    try:
        await prepare_victims(admin)
        versions = await mallory.request(18, 3, {"client_software_name": "t",
                                                 "client_software_version": "1"})
        advertised = {api["api_key"] for api in versions["api_keys"]}
        unprobed = advertised - set(PROBES) - set(NOT_AUTHORIZED_BY_KAFKA)
        assert not unprobed, f"APIs without an authorization probe here: {sorted(unprobed)}"
        assert set(PROBES) <= advertised, sorted(set(PROBES) - advertised)
        for api_key, probes in sorted(PROBES.items()):
            for version, body, check in probes:
                answer = await mallory.request(api_key, version,
                                               body() if callable(body) else body)
                try:
                    check(answer)
                except AssertionError as exc:
                    raise AssertionError(f"api {api_key} v{version}: {exc}") from None

        # Nothing mallory sent changed anything the admin owns.
        topics = await admin.request(3, 12, {"topics": None})
        names = {t["name"] for t in topics["topics"]}
        assert SECRET in names and "mallory-made" not in names
        fetched = await admin.request(9, 7, {"group_id": GROUP, "topics": None})
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 1
        end = await admin.request(2, 7, {"topics": [
            {"name": SECRET, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        assert end["topics"][0]["partitions"][0]["offset"] == 1
    finally:
        await mallory.aclose()
        await admin.aclose()
