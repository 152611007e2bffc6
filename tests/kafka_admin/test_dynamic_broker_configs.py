"""Dynamic broker configs with real admin clients against `ledgerwire standalone`: librdkafka's
IncrementalAlterConfigs and legacy AlterConfigs on BROKER resources, and Apache Kafka's Java
AdminClient on the cluster default.  Changes are stored in the metadata store, take effect
without a restart (a produce over the new message.max.bytes is refused at once, topics report
the new retention default) and survive a kill -9; DescribeConfigs reports DYNAMIC_BROKER_CONFIG /
DYNAMIC_DEFAULT_BROKER_CONFIG as their sources.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from tests.support.java_clients import run_java
from tests.support.standalone import Standalone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def produce_one(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000,
                         "message.max.bytes": 10_000_000})
    producer.produce(topic, b"x" * size, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(20)
    return errors[0]


def broker_configs(admin: AdminClient, name: str = "0") -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.BROKER, name)
    return admin.describe_configs([resource])[resource].result(30)


def test_dynamic_broker_configs(tmp_path: Path) -> None:
    server = Standalone(tmp_path / "data")
    server.start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        admin.create_topics([NewTopic("dyn", 1)])["dyn"].result(30)
        assert produce_one(server.bootstrap, "dyn", 5000) is None
        static = broker_configs(admin)["message.max.bytes"]
        assert static.source == ConfigSource.STATIC_BROKER_CONFIG.value and not static.is_read_only

        broker = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
            ConfigEntry("message.max.bytes", "2000",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([broker])[broker].result(30)
        refused = produce_one(server.bootstrap, "dyn", 5000)
        assert refused is not None and refused.code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert produce_one(server.bootstrap, "dyn", 500) is None
        entry = broker_configs(admin)["message.max.bytes"]
        assert (entry.value, entry.source) == ("2000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

        # the cluster-wide default, through the Java client: topics inherit it
        java = run_java("KafkaAdmin", bootstrap=server.bootstrap, op="incremental_alter_configs",
                        type="BROKER", name="", set="log.retention.ms:3600000,"
                                                    "log.cleaner.delete.retention.ms:1000")
        assert java.one("altered")
        topic = run_java("KafkaAdmin", bootstrap=server.bootstrap, op="describe_configs",
                         type="TOPIC", name="dyn").one("configs")["entries"]
        assert topic["retention.ms"]["value"] == "3600000"
        assert topic["retention.ms"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
        assert topic["delete.retention.ms"]["value"] == "1000"
        assert topic["max.message.bytes"]["value"] == "2000"
        assert topic["max.message.bytes"]["source"] == "DYNAMIC_BROKER_CONFIG"
        default = run_java("KafkaAdmin", bootstrap=server.bootstrap, op="describe_configs",
                           type="BROKER", name="").one("configs")["entries"]
        assert {n: (e["value"], e["source"]) for n, e in default.items()} == {
            "log.retention.ms": ("3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
            "log.cleaner.delete.retention.ms": ("1000", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
        static_change = run_java("KafkaAdmin", bootstrap=server.bootstrap,
                                 op="incremental_alter_configs", type="BROKER", name="0",
                                 set="broker.id:7")
        assert static_change.one("error")["error"] == "InvalidRequestException"
        unknown = run_java("KafkaAdmin", bootstrap=server.bootstrap,
                           op="incremental_alter_configs", type="BROKER", name="0",
                           set="no.such.config:1")
        assert unknown.one("error")["error"] == "InvalidConfigurationException"

        # legacy AlterConfigs replaces the broker's own set: message.max.bytes goes back
        legacy = ConfigResource(ResourceType.BROKER, "0",
                                set_config={"log.retention.bytes": "123456789"})
        with pytest.warns(DeprecationWarning):  # the client's, not ours: the API is still served
            futures = admin.alter_configs([legacy])
        futures[legacy].result(30)
        after = broker_configs(admin)
        assert after["message.max.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert after["log.retention.bytes"].value == "123456789"
        assert produce_one(server.bootstrap, "dyn", 5000) is None
        server.kill()  # kill -9: what was acknowledged is in the metadata store already
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()
    server.start()  # stored, not remembered: a restart keeps them
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        after = broker_configs(admin)
        assert after["log.retention.ms"].value == "3600000"
        assert after["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        assert after["log.retention.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    finally:
        server.stop()
