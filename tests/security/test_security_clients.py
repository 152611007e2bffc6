"""SASL, TLS and ACLs with real clients (confluent-kafka, kafka-python) on the in-process stack."""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from protocols.kafka.codec import RequestHeader, encode_request
from tests.support.kafka_python import poll_records
from tests.support.security_stack import (
    failed_login,
    make_self_signed_cert,
    produce,
    scram_ssl,
    secure_stack,
)

SCRAM_512 = "SCRAM-SHA-512"
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_self_signed_cert(tmp_path_factory.mktemp("tls"))


def consume(config: dict[str, Any], topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(100):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value() or b"")
            if len(values) >= count:
                break
    finally:
        consumer.close()
    return values


async def test_scram_sha512_over_tls_with_confluent(certificate: tuple[Path, Path]) -> None:
    async with secure_stack(sasl_mechanisms=("PLAIN", "SCRAM-SHA-256", SCRAM_512),
                            tls=certificate, users={"alice": "alice-secret"}) as stack:
        config = scram_ssl(stack.bootstrap, certificate[0], "alice", "alice-secret")
        errors = await trio.to_thread.run_sync(produce, config, "tls-topic", 5)
        assert errors == [None] * 5
        values = await trio.to_thread.run_sync(consume, config, "tls-topic", 5)
        assert values == [f"v{i}".encode() for i in range(5)]


async def test_wrong_password_is_rejected(certificate: tuple[Path, Path]) -> None:
    async with secure_stack(sasl_mechanisms=(SCRAM_512,), tls=certificate,
                            users={"alice": "alice-secret"}) as stack:
        config = scram_ssl(stack.bootstrap, certificate[0], "alice", "not-her-password")
        seen = await trio.to_thread.run_sync(failed_login, config)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen
        assert any("invalid credentials" in e.str() for e in seen), seen
        unknown = scram_ssl(stack.bootstrap, certificate[0], "mallory", "x")
        seen = await trio.to_thread.run_sync(failed_login, unknown)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen


def set_up_acls(admin_config: dict[str, Any]) -> list[AclBinding]:
    admin = AdminClient(admin_config)
    topics = [NewTopic("locked", 1, 1), NewTopic("open", 1, 1), NewTopic("hidden", 1, 1)]
    for future in admin.create_topics(topics).values():
        future.result(10)
    bindings = [
        AclBinding(ResourceType.TOPIC, "locked", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "locked", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.WRITE, AclPermissionType.DENY),
        AclBinding(ResourceType.TOPIC, "open", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
    ]
    for future in admin.create_acls(bindings).values():
        future.result(10)
    described = admin.describe_acls(AclBindingFilter(  # None: any name / host
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,  # type: ignore[arg-type]
        AclOperation.ANY, AclPermissionType.ANY)).result(10)
    return list(described)


async def test_acl_denying_write_fails_produce(certificate: tuple[Path, Path]) -> None:
    async with secure_stack(sasl_mechanisms=(SCRAM_512,), tls=certificate,
                            users={"alice": "alice-secret", "admin": "admin-secret"},
                            authorization=True, super_users=("User:admin",)) as stack:
        admin_config = scram_ssl(stack.bootstrap, certificate[0], "admin", "admin-secret")
        described = await trio.to_thread.run_sync(set_up_acls, admin_config)
        assert len(described) == 3
        alice = scram_ssl(stack.bootstrap, certificate[0], "alice", "alice-secret")
        errors = await trio.to_thread.run_sync(produce, alice, "locked", 1)
        assert [e.code() if e else None for e in errors] == [
            KafkaError.TOPIC_AUTHORIZATION_FAILED]
        assert await trio.to_thread.run_sync(produce, alice, "open", 2) == [None, None]
        # alice may not manage ACLs (ALTER on the cluster): CreateAcls is refused
        admin = AdminClient(alice)
        future = admin.create_acls([AclBinding(
            ResourceType.TOPIC, "locked", ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.WRITE, AclPermissionType.ALLOW)])
        with pytest.raises(KafkaException) as refused:
            await trio.to_thread.run_sync(lambda: [f.result(10) for f in future.values()])
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        await trio.to_thread.run_sync(refused_admin_calls, alice)


def refused_admin_calls(alice: dict[str, Any]) -> None:
    """What alice (WRITE on "open", DESCRIBE on "locked", nothing else) may not do or see."""
    admin = AdminClient(alice)
    assert set(admin.list_topics(timeout=10).topics) == {"locked", "open"}
    resource = ConfigResource(ResourceType.TOPIC, "open")
    with pytest.raises(KafkaException) as refused:
        admin.describe_configs([resource])[resource].result(10)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    alter = ConfigResource(ResourceType.TOPIC, "open", incremental_configs=[ConfigEntry(
        "retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([alter])[alter].result(10)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    tp = TopicPartition("open", 0, 1)
    with pytest.raises(KafkaException) as refused:
        admin.delete_records([tp])[tp].result(10)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def plain_round_trip(bootstrap: str, password: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    security = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                "sasl_plain_username": "bob", "sasl_plain_password": password}
    producer = KafkaProducer(bootstrap_servers=bootstrap, **security)
    try:
        for i in range(3):
            producer.send("plain-topic", f"p{i}".encode()).get(timeout=10)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer("plain-topic", bootstrap_servers=bootstrap,
                             auto_offset_reset="earliest", **security)
    try:
        return [m.value for m in poll_records(consumer, 3)][:3]
    finally:
        consumer.close()


async def test_plain_over_sasl_plaintext_with_kafka_python() -> None:
    async with secure_stack(sasl_mechanisms=("PLAIN", SCRAM_512),
                            users={"bob": "bob-secret"}) as stack:
        values = await trio.to_thread.run_sync(plain_round_trip, stack.bootstrap, "bob-secret")
        assert values == [b"p0", b"p1", b"p2"]
        # (a wrong password is checked with librdkafka: kafka-python's failed clients leak
        # their sockets to the garbage collector, which the warnings-as-errors run refuses)
        wrong = {"bootstrap.servers": stack.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                 "sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": "wrong"}
        seen = await trio.to_thread.run_sync(failed_login, wrong)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen


def raw_exchange(port: int, frames: list[bytes]) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for frame in frames:
            sock.sendall(frame)
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk


async def test_unauthenticated_requests_close_the_connection() -> None:
    async with secure_stack(sasl_mechanisms=("PLAIN",), users={"bob": "bob-secret"}) as stack:
        metadata = encode_request(RequestHeader(3, 1, 7, "raw"), {"topics": None})
        assert await trio.to_thread.run_sync(raw_exchange, stack.port, [metadata]) == b""
        # SaslHandshake v0, then a raw PLAIN token: answered with an empty token frame, and
        # the next request (Metadata) is served
        handshake = encode_request(RequestHeader(17, 0, 1, "raw"), {"mechanism": "PLAIN"})
        token = b"\0bob\0bob-secret"
        frames = [handshake, struct.pack(">i", len(token)) + token, metadata]

        def exchange_then_close() -> bytes:
            with socket.create_connection(("127.0.0.1", stack.port), timeout=5) as sock:
                received = b""
                for frame in frames:
                    sock.sendall(frame)
                    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
                    received += sock.recv(size, socket.MSG_WAITALL) if size else b""
                return received

        answers = await trio.to_thread.run_sync(exchange_then_close)
        assert b"127.0.0.1" in answers  # the Metadata answer names the broker
