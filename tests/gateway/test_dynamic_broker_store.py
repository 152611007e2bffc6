"""Dynamic broker configs are shared: two brokers' stores on one metadata store, one alters,
the other applies the change through its watch; concurrent alterations both survive (CAS)."""

from __future__ import annotations

import trio

from gateway.config.dynamic_brokers import DynamicBrokerConfigStore
from ledger_backend.metadata import open_store
from protocols.kafka.broker_configs import DynamicBrokerConfigs


async def test_a_change_reaches_the_other_broker_and_concurrent_changes_merge() -> None:
    store = await open_store("memory:")
    try:
        first, second = DynamicBrokerConfigStore(store), DynamicBrokerConfigStore(store)
        seen: list[DynamicBrokerConfigs] = []

        async def on_change(state: DynamicBrokerConfigs) -> None:
            seen.append(state)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(second.follow, on_change)
            await trio.sleep(0.1)
            assert seen == [DynamicBrokerConfigs()]

            async def set_default(name: str, value: str) -> None:
                await first.alter(lambda s: s.with_scope("", {**s.scope(""), name: value}))

            async with trio.open_nursery() as writers:
                writers.start_soon(set_default, "log.retention.ms", "1000")
                writers.start_soon(set_default, "message.max.bytes", "2000")
            await first.alter(lambda s: s.with_scope("1", {"log.retention.ms": "5"}))
            with trio.fail_after(5):
                while not seen or seen[-1].brokers.get("1") is None:  # noqa: ASYNC110 - polls what a watch fills
                    await trio.sleep(0.01)
            state = seen[-1]
            assert dict(state.default) == {"log.retention.ms": "1000", "message.max.bytes": "2000"}
            assert state.effective(1)["log.retention.ms"] == ("5", 2)
            assert state.effective(0)["log.retention.ms"] == ("1000", 3)
            assert state.topic_defaults(0)["max.message.bytes"] == ("2000", 3)
            nursery.cancel_scope.cancel()
    finally:
        await store.close()
