"""RocketMQ requests that name one resource and act on another, as a low-privilege account.

A real secured `ledgerwire standalone` (Kafka SASL and ACLs on, RocketMQ accounts).  The victim
account may write and read `rmq_secret` and owns the transactional id PG_VICTIM; the attacker
may only read its own group CG_ATK and owns the transactional id PG_ATK.  Over raw, signed
remoting frames the attacker tries:

- CONSUMER_SEND_MSG_BACK of a message of `rmq_secret` (its commit-log offset is guessable)
  into its own group's dead-letter topic, which it may read: it must be refused, with or
  without an originTopic;
- END_TRANSACTION of the victim's half message (a rollback) under its own producer group: it
  must be refused, and the victim's commit must still deliver the message;
- a send straight into the broker's schedule or transaction topics, whose messages carry the
  topic they are delivered to (REAL_TOPIC): refused even with every ACL on those topics, and
  so is a Kafka produce into them (Kafka's rule for internal topics);
- deleting or changing its own group's dead-letter and retry topics with READ on the group
  only: refused (that needs DELETE or ALTER_CONFIGS on the group);
- a HEART_BEAT registering it as a producer of the victim's group (after the victim's own), to
  be sent the group's transaction check-backs, which carry the half message, and an
  UNREGISTER_CLIENT of the victim's producer: the check-back must still go to the victim.

and over RocketMQ 5 gRPC (signed metadata):

- EndTransaction of the victim's half message, naming a topic it may write: refused;
- a Telemetry session publishing to `rmq_secret` (which would register it as the topic's
  transactional producer, to which the broker pushes check-backs carrying half messages) or
  subscribing to it: refused, while the victim's own session is answered;
- NotifyClientTermination naming the victim's client id (a client's own claim, not a secret):
  the victim's session stays, and its transaction's check-back still reaches it.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator

import grpc
import pytest
import trio
from confluent_kafka.admin import AclOperation, ResourceType
from google.protobuf.message import Message

from protocols.kafka.errors import ErrorCode
from protocols.kafka.record_batch import build_batch
from protocols.rocketmq.errors import ResponseCode
from protocols.rocketmq.grpc.auth import signature
from protocols.rocketmq.grpc.v2 import definition_pb2 as pb
from protocols.rocketmq.grpc.v2 import service_pb2 as spb
from protocols.rocketmq.message_encoding import decode_stored_messages
from protocols.rocketmq.message_id import decode_offset_message_id
from protocols.rocketmq.request_codes import RequestCode as RC
from tests.rocketmq.remoting_client import RawClient
from tests.rocketmq.test_rocketmq_broker_raw import pull_ext, send_ext
from tests.rocketmq.test_rocketmq_kafka_acls import acl, broker, grant, signed
from tests.rocketmq5.test_rocketmq5_security import signed as signed5
from tests.support.secured_standalone import login, secured_standalone
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

VICTIM, VICTIM_SK = "RmqVictim1", "RmqVictim1Secret"
ATTACKER, ATTACKER_SK = "RmqAttacker1", "RmqAttacker1Secret"
SECRET, VICTIM_GROUP, ATTACK_GROUP = "rmq_secret", "CG_VICTIM", "CG_ATK"
SHARED_GROUP = "CG_SHARED"  # the victim reads in it; the attacker may only DESCRIBE it
ATTACK_TOPIC = "rmq_atk"
# the broker's own topics whose messages name the topic they are delivered to
MACHINERY = ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"]
SERVICE = "/apache.rocketmq.v2.MessagingService/"
ACCOUNTS = f"""
[[rocketmq.acl.accounts]]
access_key = "{VICTIM}"
secret_key = "{VICTIM_SK}"

[[rocketmq.acl.accounts]]
access_key = "{ATTACKER}"
secret_key = "{ATTACKER_SK}"
"""
NO_PERMISSION = ResponseCode.NO_PERMISSION


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    standalone = secured_standalone(tmp_path_factory.mktemp("rmq-owned"),
                                    "[rocketmq]\ntransaction_check_timeout_s = 1.0\n" + ACCOUNTS)
    standalone.start()
    try:
        victim, attacker = f"User:{VICTIM}", f"User:{ATTACKER}"
        grant(standalone, [SECRET, ATTACK_TOPIC], [
            acl(ResourceType.TOPIC, SECRET, victim, AclOperation.WRITE),
            acl(ResourceType.TOPIC, SECRET, victim, AclOperation.READ),
            acl(ResourceType.GROUP, VICTIM_GROUP, victim, AclOperation.READ),
            acl(ResourceType.TRANSACTIONAL_ID, "PG_VICTIM", victim, AclOperation.WRITE),
            acl(ResourceType.GROUP, ATTACK_GROUP, attacker, AclOperation.READ),
            acl(ResourceType.TRANSACTIONAL_ID, "PG_ATK", attacker, AclOperation.WRITE),
            acl(ResourceType.TOPIC, ATTACK_TOPIC, attacker, AclOperation.WRITE),
            acl(ResourceType.TOPIC, ATTACK_TOPIC, victim, AclOperation.READ),
            acl(ResourceType.GROUP, SHARED_GROUP, victim, AclOperation.READ),
            acl(ResourceType.GROUP, SHARED_GROUP, attacker, AclOperation.DESCRIBE),
            *[acl(ResourceType.TOPIC, t, p, AclOperation.ALL) for t in MACHINERY
              for p in (attacker, "User:mallory")],
        ])
        yield standalone
    finally:
        standalone.stop()


async def victim_send(client: RawClient, body: bytes, *, half: bool = False) -> int:
    """The commit-log offset of a message the victim sent to the secret topic."""
    ext = send_ext(SECRET, {"UNIQ_KEY": body.decode()}, queue_id=0)
    ext["a"] = "PG_VICTIM"
    if half:
        ext["f"] = 4  # sysFlag: transaction prepared
    answer = await client.call(RC.SEND_MESSAGE_V2, signed(ext, body, VICTIM, VICTIM_SK), body)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return decode_offset_message_id(answer.ext_fields["msgId"])[2]


async def test_send_back_of_another_topics_message_is_refused(server: Standalone) -> None:
    client = await RawClient.connect(broker(server))
    try:
        offset = await victim_send(client, b"secret-1")
        for origin in ({}, {"originTopic": ATTACK_GROUP}):
            back = {"group": ATTACK_GROUP, "offset": offset, "delayLevel": -1,
                    "maxReconsumeTimes": 16, **origin}
            answer = await client.call(RC.CONSUMER_SEND_MSG_BACK,
                                       signed(back, b"", ATTACKER, ATTACKER_SK))
            assert answer.code == NO_PERMISSION, (origin, answer.code, answer.remark)
        # nothing reached the dead-letter topic the attacker reads
        pulled = await client.call(RC.PULL_MESSAGE, signed(
            pull_ext(f"%DLQ%{ATTACK_GROUP}", 0, 0, group=ATTACK_GROUP), b"",
            ATTACKER, ATTACKER_SK))
        assert pulled.code != ResponseCode.SUCCESS or not decode_stored_messages(pulled.body)
    finally:
        await client.aclose()


async def test_end_transaction_of_another_producer_groups_half_is_refused(
        server: Standalone) -> None:
    client = await RawClient.connect(broker(server))
    try:
        half = await victim_send(client, b"half-1", half=True)
        end = {"producerGroup": "PG_ATK", "tranStateTableOffset": 0, "commitLogOffset": half,
               "commitOrRollback": 12, "fromTransactionCheck": False}
        answer = await client.call(RC.END_TRANSACTION, signed(end, b"", ATTACKER, ATTACKER_SK))
        assert answer.code == NO_PERMISSION, (answer.code, answer.remark)
        # the owner's decision still counts: committed, the message is delivered
        commit = {**end, "producerGroup": "PG_VICTIM", "commitOrRollback": 8}
        answer = await client.call(RC.END_TRANSACTION, signed(commit, b"", VICTIM, VICTIM_SK))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        pulled = await client.call(RC.PULL_MESSAGE, signed(
            pull_ext(SECRET, 0, 0, suspend_ms=5000, group=VICTIM_GROUP), b"",
            VICTIM, VICTIM_SK), wait_s=15)
        assert pulled.code == ResponseCode.SUCCESS, pulled.remark
        assert b"half-1" in [m.body for m in decode_stored_messages(pulled.body)]
    finally:
        await client.aclose()


async def test_sends_into_the_brokers_own_delivery_topics_are_refused(
        server: Standalone) -> None:
    client = await RawClient.connect(broker(server))
    try:
        for topic in MACHINERY:
            # a held message that would be delivered into the secret topic
            ext = send_ext(topic, {"REAL_TOPIC": SECRET, "REAL_QID": "0", "DELAY": "1"})
            answer = await client.call(RC.SEND_MESSAGE_V2, signed(ext, b"forged", ATTACKER,
                                                                  ATTACKER_SK), b"forged")
            assert answer.code == NO_PERMISSION, (topic, answer.code, answer.remark)
    finally:
        await client.aclose()


async def test_consume_stats_without_a_topic_list_only_topics_the_caller_may_describe(
        server: Standalone) -> None:
    """GET_CONSUME_STATS of a group without a topic lists the group's committed topics: DESCRIBE
    on the group alone must not show the topics the caller may not DESCRIBE (Kafka's OffsetFetch
    of all topics leaves them out the same way)."""
    client = await RawClient.connect(broker(server))
    try:
        for topic in (SECRET, ATTACK_TOPIC):
            commit = {"consumerGroup": SHARED_GROUP, "topic": topic, "queueId": 0,
                      "commitOffset": 0}
            answer = await client.call(RC.UPDATE_CONSUMER_OFFSET,
                                       signed(commit, b"", VICTIM, VICTIM_SK))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        stats = {"consumerGroup": SHARED_GROUP}
        seen = await client.call(RC.GET_CONSUME_STATS, signed(stats, b"", VICTIM, VICTIM_SK))
        assert seen.code == ResponseCode.SUCCESS, seen.remark
        assert SECRET.encode() in seen.body and ATTACK_TOPIC.encode() in seen.body
        seen = await client.call(RC.GET_CONSUME_STATS,
                                 signed(stats, b"", ATTACKER, ATTACKER_SK))
        assert seen.code == ResponseCode.SUCCESS, seen.remark
        assert ATTACK_TOPIC.encode() in seen.body
        assert SECRET.encode() not in seen.body, seen.body
        named = await client.call(RC.GET_CONSUME_STATS, signed(
            {**stats, "topic": SECRET}, b"", ATTACKER, ATTACKER_SK))
        assert named.code == NO_PERMISSION, (named.code, named.remark)
    finally:
        await client.aclose()


async def test_a_groups_reader_cannot_delete_or_change_its_retry_and_dead_letter_topics(
        server: Standalone) -> None:
    client = await RawClient.connect(broker(server))
    try:
        for prefix in ("%DLQ%", "%RETRY%"):
            topic = prefix + ATTACK_GROUP
            requests: list[tuple[int, dict[str, object]]] = [
                (RC.DELETE_TOPIC_IN_BROKER, {"topic": topic}),
                (RC.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": 1,
                                              "writeQueueNums": 1, "perm": 2})]
            for code, ext in requests:
                answer = await client.call(code, signed(ext, b"", ATTACKER, ATTACKER_SK))
                assert answer.code == NO_PERMISSION, (code, topic, answer.code, answer.remark)
    finally:
        await client.aclose()


async def test_kafka_produce_into_the_brokers_own_topics_is_refused(server: Standalone) -> None:
    client = await RawClient.connect(broker(server))
    try:  # a delayed send: the schedule topic exists
        ext = send_ext(SECRET, {"DELAY": "1"}, queue_id=0)
        ext["a"] = "PG_VICTIM"
        answer = await client.call(RC.SEND_MESSAGE_V2, signed(ext, b"later", VICTIM, VICTIM_SK),
                                   b"later")
        assert answer.code == ResponseCode.SUCCESS, answer.remark
    finally:
        await client.aclose()
    kafka = await login(server.kafka_port, "mallory")
    try:
        produced = await kafka.request(0, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": MACHINERY[0], "partition_data": [{"index": 0, "records": build_batch(
                [(b"k", b"forged")])}]}]})
    finally:
        await kafka.aclose()
    [partition] = produced["responses"][0]["partition_responses"]
    assert partition["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION, produced


async def test_check_backs_go_only_to_a_producer_that_owns_the_group(server: Standalone) -> None:
    victim = await RawClient.connect(broker(server))
    attacker = await RawClient.connect(broker(server))
    try:
        for client, ak, sk in ((victim, VICTIM, VICTIM_SK), (attacker, ATTACKER, ATTACKER_SK)):
            beat = json.dumps({"clientID": f"client-{ak}", "consumerDataSet": [],
                               "producerDataSet": [{"groupName": "PG_VICTIM"}]}).encode()
            answer = await client.call(RC.HEART_BEAT, signed({}, beat, ak, sk), beat)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        # nor may it unregister the victim's producer (client ids are not secret)
        gone = {"clientID": f"client-{VICTIM}", "producerGroup": "PG_VICTIM"}
        answer = await attacker.call(RC.UNREGISTER_CLIENT, signed(gone, b"", ATTACKER,
                                                                  ATTACKER_SK))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        await victim_send(victim, b"half-3", half=True)
        # undecided past the check timeout (1 s): checked back with the group's last producer
        # registered, which must be the victim, not the attacker that registered after it
        check = await victim.receive(wait_s=60)
        assert check is not None and check.code == RC.CHECK_TRANSACTION_STATE
        assert b"half-3" in check.body
    finally:
        await victim.aclose()
        await attacker.aclose()


def grpc_end_transaction(server: Standalone, topic: str, transaction_id: str, ak: str,
                         sk: str) -> int:
    """A raw EndTransaction (rollback); the RocketMQ status code of the answer."""
    request = spb.EndTransactionRequest(topic=pb.Resource(name=topic), message_id="HALF",
                                        transaction_id=transaction_id, resolution=pb.ROLLBACK)
    with grpc.insecure_channel(f"127.0.0.1:{server.rocketmq_grpc_port}") as channel:
        call = channel.unary_unary(SERVICE + "EndTransaction",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=spb.EndTransactionResponse.FromString)
        return int(call(request, metadata=signed5(ak, sk), timeout=20).status.code)


async def test_grpc_end_transaction_of_another_topics_half_is_refused(
        server: Standalone) -> None:
    client = await RawClient.connect(broker(server))
    try:
        ext = send_ext(SECRET, {"UNIQ_KEY": "half-2"}, queue_id=0)
        ext["a"], ext["f"] = "PG_VICTIM", 4
        answer = await client.call(RC.SEND_MESSAGE_V2, signed(ext, b"half-2", VICTIM, VICTIM_SK),
                                   b"half-2")
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        half_id = answer.ext_fields["msgId"]
        code = await trio.to_thread.run_sync(grpc_end_transaction, server, ATTACK_TOPIC, half_id,
                                             ATTACKER, ATTACKER_SK)
        assert code == pb.FORBIDDEN, code
        commit = {"producerGroup": "PG_VICTIM", "tranStateTableOffset": 0,
                  "commitLogOffset": decode_offset_message_id(half_id)[2],
                  "commitOrRollback": 8, "fromTransactionCheck": False}
        answer = await client.call(RC.END_TRANSACTION, signed(commit, b"", VICTIM, VICTIM_SK))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        pulled = await client.call(RC.PULL_MESSAGE, signed(
            pull_ext(SECRET, 0, 0, suspend_ms=5000, group=VICTIM_GROUP), b"",
            VICTIM, VICTIM_SK), wait_s=15)
        assert b"half-2" in [m.body for m in decode_stored_messages(pulled.body)]
    finally:
        await client.aclose()


def telemetry_status(server: Standalone, settings: pb.Settings, ak: str, sk: str) -> int:
    """The status of the answer to a Telemetry stream's settings command."""
    with grpc.insecure_channel(f"127.0.0.1:{server.rocketmq_grpc_port}") as channel:
        call = channel.stream_stream(SERVICE + "Telemetry",
                                     request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=spb.TelemetryCommand.FromString)
        answers = call(iter([spb.TelemetryCommand(settings=settings)]),
                       metadata=signed5(ak, sk), timeout=20)
        return int(next(iter(answers)).status.code)


def test_telemetry_sessions_need_the_topics_and_group_they_register_for(
        server: Standalone) -> None:
    publishing = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(
        topics=[pb.Resource(name=SECRET)]))
    subscribing = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name=ATTACK_GROUP),
        subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=SECRET))]))
    assert telemetry_status(server, publishing, VICTIM, VICTIM_SK) == pb.OK
    for settings in (publishing, subscribing):
        assert telemetry_status(server, settings, ATTACKER, ATTACKER_SK) == pb.FORBIDDEN


def metadata5(ak: str, sk: str, client_id: str) -> list[tuple[str, str]]:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return [("x-mq-date-time", stamp), ("x-mq-client-id", client_id),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, "
                              f"SignedHeaders=x-mq-date-time, Signature={signature(sk, stamp)}")]


def test_another_principal_cannot_end_a_clients_session_by_naming_its_id(
        server: Standalone) -> None:
    client_id = "victim-5x-client"
    victim = metadata5(VICTIM, VICTIM_SK, client_id)
    commands: queue.Queue[spb.TelemetryCommand | None] = queue.Queue()
    commands.put(spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=SECRET)]))))
    with grpc.insecure_channel(f"127.0.0.1:{server.rocketmq_grpc_port}") as channel:
        def unary(name: str, request: Message, answer: type[Message],
                  metadata: list[tuple[str, str]]) -> Message:
            call = channel.unary_unary(SERVICE + name,
                                       request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=answer.FromString)
            return call(request, metadata=metadata, timeout=20)  # type: ignore[no-any-return]

        telemetry = channel.stream_stream(SERVICE + "Telemetry",
                                          request_serializer=lambda m: m.SerializeToString(),
                                          response_deserializer=spb.TelemetryCommand.FromString)
        pushed = telemetry(iter(commands.get, None), metadata=victim, timeout=60)
        try:
            assert next(pushed).status.code == pb.OK  # the session is open
            ended = unary("NotifyClientTermination", spb.NotifyClientTerminationRequest(),
                          spb.NotifyClientTerminationResponse,
                          metadata5(ATTACKER, ATTACKER_SK, client_id))
            assert ended.status.code == pb.OK
            sent = unary("SendMessage", spb.SendMessageRequest(messages=[pb.Message(
                topic=pb.Resource(name=SECRET), body=b"half-5",
                system_properties=pb.SystemProperties(message_id="HALF5",
                                                      message_type=pb.TRANSACTION))]),
                spb.SendMessageResponse, victim)
            assert sent.status.code == pb.OK, sent.status
            # left undecided past the check timeout (1 s): the broker asks the victim's session
            check = next(pushed)
            assert check.recover_orphaned_transaction_command.message.body == b"half-5"
        finally:
            commands.put(None)
            pushed.cancel()
