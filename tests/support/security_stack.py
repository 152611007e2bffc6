"""An in-process Kafka stack with the security parts: TLS, SASL users, ACL store, authorizer.

memory metadata store + MemoryBookKeeper + TopicService + GroupCoordinator + KafkaBroker,
served by `serve_kafka` on 127.0.0.1 port 0 -- the same parts `ledgerwire standalone`
assembles, plus gateway/kafka_security's credentials and authorizer.  Also a throwaway
self-signed certificate made with the `openssl` command line (valid for 127.0.0.1/localhost),
and small confluent-kafka helpers (SASL_SSL settings, produce, a login that must fail).
"""

from __future__ import annotations

import ssl
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from gateway.coordinator.offset_store import LedgerOffsetStore
from gateway.kafka.broker import KafkaBroker, KafkaBrokerConfig
from gateway.kafka.listener import serve_kafka
from gateway.security.acl_store import AclStore, Authorizer
from gateway.security.credentials import CredentialStore
from gateway.security.setup import server_ssl_context
from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.group_coordinator import CoordinatorConfig, GroupCoordinator


def scram_ssl(bootstrap: str, cert: Path, user: str, password: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(cert)}


def produce(config: dict[str, Any], topic: str, count: int) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 10000})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), key=b"k",
                         on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    return errors


def failed_login(config: dict[str, Any], timeout_s: float = 30.0) -> list[KafkaError]:
    """The client errors of a login that must fail: every metadata request fails, asked again
    until the broker's authentication error has come (or `timeout_s`), since on a loaded machine
    the TLS and SASL round trips can outlast one 3 s request."""
    seen: list[KafkaError] = []
    admin = AdminClient({**config, "error_cb": seen.append})  # type: ignore[dict-item]
    deadline = time.monotonic() + timeout_s
    while True:
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=3)
        admin.poll(1)  # error_cb is served from poll()
        if (any(e.code() == KafkaError._AUTHENTICATION for e in seen)
                or time.monotonic() > deadline):
            return seen


def make_self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files for CN=localhost with SANs localhost and 127.0.0.1."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


@dataclass
class SecureStack:
    broker: KafkaBroker
    topics: TopicService
    credentials: CredentialStore
    acls: AclStore
    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@asynccontextmanager
async def secure_stack(
    *, sasl_mechanisms: tuple[str, ...] | None = None, tls: tuple[Path, Path] | None = None,
    users: dict[str, str] | None = None, authorization: bool = False,
    super_users: tuple[str, ...] = (), allow_if_no_acl: bool = False,
    topic_config: TopicServiceConfig | None = None,
) -> AsyncIterator[SecureStack]:
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bk:
            factory = ManagedLedgerFactory(store, bk)
            topics = TopicService(store, factory, topic_config or TopicServiceConfig())
            await topics.load()
            credentials = CredentialStore(store)
            for name, password in (users or {}).items():
                await credentials.ensure_user(name, password)
            acls = AclStore(store)
            authorizer = Authorizer(acls, enabled=authorization, super_users=super_users,
                                    allow_if_no_acl=allow_if_no_acl)
            coordinator = GroupCoordinator(
                LedgerOffsetStore(factory), CoordinatorConfig(initial_rebalance_delay_s=0.1)
            )
            broker = KafkaBroker(
                topics,
                KafkaBrokerConfig(broker_id=1, advertised_host="127.0.0.1", advertised_port=0,
                                  cluster_id="secure-test"),
                group_coordinator=coordinator, authorizer=authorizer, credentials=credentials,
            )
            ssl_context: ssl.SSLContext | None = None
            if tls is not None:
                ssl_context = server_ssl_context(str(tls[0]), str(tls[1]))
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(coordinator.run)
                    await nursery.start(acls.run)

                    async def run_server(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                        await serve_kafka(broker, "127.0.0.1", 0, task_status=task_status,
                                          ssl_context=ssl_context,
                                          sasl_mechanisms=sasl_mechanisms)

                    address = await nursery.start(run_server)
                    yield SecureStack(broker, topics, credentials, acls, address.port)
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    await topics.close()
    finally:
        with trio.CancelScope(shield=True):
            await store.close()
