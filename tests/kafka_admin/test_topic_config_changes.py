"""TopicService.alter_topic_configs: CAS on the topic node, applied to open partitions."""

from __future__ import annotations

import pytest

from gateway.topics.topic_service import TopicService, TopicServiceConfig
from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerFactory
from ledger_backend.metadata import open_store
from protocols.kafka.errors import InvalidConfigError, UnknownTopicOrPartitionError


async def test_alter_is_cas_and_takes_effect_on_open_partitions() -> None:
    store = await open_store("memory:")
    try:
        async with MemoryBookKeeper(store) as bk:
            factory = ManagedLedgerFactory(store, bk)
            first = TopicService(store, factory, TopicServiceConfig())
            second = TopicService(store, factory, TopicServiceConfig())
            await first.create_topic("t", 1, {"retention.ms": "1000"})
            await second.load()
            plog = await first.partition("t", 0)
            # second's cached view is stale; its update still starts from the stored configs
            await first.alter_topic_configs("t", lambda c: {**c, "max.message.bytes": "777"})
            await second.alter_topic_configs("t", lambda c: {**c, "segment.bytes": "4096",
                                                             "segment.ms": "60000"})
            await first.refresh_topic("t")
            assert first.topics()["t"].configs == {
                "retention.ms": "1000", "max.message.bytes": "777",
                "segment.bytes": "4096", "segment.ms": "60000"}
            # first applied its own change to its open partition
            assert plog.config.max_message_bytes == 777
            await first.alter_topic_configs("t", lambda c: {
                **c, "message.timestamp.type": "LogAppendTime", "retention.ms": "-1"})
            ml = first._partition_ledgers[("t", 0)]
            assert plog.config.log_append_time is True
            assert ml.config.retention_time_s is None
            assert ml.config.max_ledger_bytes == 4096 and ml.config.max_ledger_age_s == 60.0

            unchanged = dict(first.topics()["t"].configs)
            preview = await first.alter_topic_configs("t", lambda c: {}, validate_only=True)
            assert preview.configs == {}
            assert first.topics()["t"].configs == unchanged
            with pytest.raises(InvalidConfigError):
                await first.alter_topic_configs("t", lambda c: {"retention.ms": "soon"})
            with pytest.raises(UnknownTopicOrPartitionError):
                await first.alter_topic_configs("missing", lambda c: dict(c))
            await first.close()
            await second.close()
    finally:
        await store.close()
