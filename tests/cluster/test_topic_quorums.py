"""Per-topic E/Qw/Qa: topic configs override the broker defaults when a partition's managed
ledger is opened; invalid settings fall back to the defaults."""

from __future__ import annotations

from typing import Any

from gateway.topics.namespaces import NamespaceRegistry
from gateway.topics.quorums import QuorumPolicyFactory, quorums_for
from ledger_backend.managed_ledger import ManagedLedgerConfig
from ledger_backend.metadata import open_store

DEFAULT = ManagedLedgerConfig(ensemble_size=3, write_quorum=2, ack_quorum=2)


def test_topic_settings_override_defaults() -> None:
    got = quorums_for({"bookkeeper.ensemble.size": "5", "bookkeeper.write.quorum": "3"}, DEFAULT)
    assert (got.ensemble_size, got.write_quorum, got.ack_quorum) == (5, 3, 2)
    assert quorums_for({}, DEFAULT) is DEFAULT
    assert quorums_for({"bookkeeper.ack.quorum": "3"}, DEFAULT) == DEFAULT  # Qa > Qw
    assert quorums_for({"bookkeeper.write.quorum": "x"}, DEFAULT) == DEFAULT


class RecordingFactory:
    def __init__(self) -> None:
        self.opened: list[tuple[str, Any]] = []

    async def open(self, name: str, config: Any = None, *, create_with: Any = ()) -> str:
        self.opened.append((name, config))
        return name

    async def exists(self, name: str) -> bool:
        return True


async def test_factory_applies_the_topic_of_the_ledger_name() -> None:
    inner = RecordingFactory()
    configs = {"my-topic": {"bookkeeper.ensemble.size": "4", "bookkeeper.write.quorum": "3",
                            "bookkeeper.ack.quorum": "3"}}
    factory = QuorumPolicyFactory(inner, "public/default", configs.get)
    await factory.open("public/default/my-topic-7", DEFAULT)
    await factory.open("public/default/other-0", DEFAULT)
    await factory.open("__system/offsets/__consumer_offsets-1", DEFAULT)
    quorums = [(c.ensemble_size, c.write_quorum, c.ack_quorum) for _, c in inner.opened]
    assert quorums == [(4, 3, 3), (3, 2, 2), (3, 2, 2)]
    assert factory.topic_of("public/default/a-b-12") == "a-b"
    assert await factory.exists("x")


async def test_factory_finds_topics_in_every_namespace_of_the_registry() -> None:
    store = await open_store("memory:")
    try:
        namespaces = NamespaceRegistry(store)
        await namespaces.load()
        await namespaces.create_tenant("acme")
        await namespaces.create_namespace("acme/prod")
        await namespaces.map_topic("orders", "acme/prod")
        inner = RecordingFactory()
        quorum = {"bookkeeper.ensemble.size": "4", "bookkeeper.write.quorum": "3",
                  "bookkeeper.ack.quorum": "3"}
        configs = {"orders": quorum, "acme.prod.events": quorum, "plain": quorum}
        factory = QuorumPolicyFactory(inner, namespaces.namespace_of, configs.get)
        await factory.open("acme/prod/orders-0", DEFAULT)  # explicit mapping
        await factory.open("acme/prod/acme.prod.events-2", DEFAULT)  # tenant.ns. prefix
        await factory.open("public/default/plain-1", DEFAULT)  # the default namespace
        await factory.open("public/default/orders-0", DEFAULT)  # not where orders lives
        await factory.open("__system/offsets/__consumer_offsets-1", DEFAULT)
        quorums = [(c.ensemble_size, c.write_quorum, c.ack_quorum) for _, c in inner.opened]
        assert quorums == [(4, 3, 3), (4, 3, 3), (4, 3, 3), (3, 2, 2), (3, 2, 2)]
        assert factory.topic_of("acme/prod/orders-x") is None
        assert factory.topic_of("orders-0") is None
    finally:
        await store.close()
