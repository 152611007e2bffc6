"""A close that meets a close under way waits for it (virtual clock).

An idle unload (gateway/topics/idle_unloader.py) takes a log out of the open ones and then
closes it: a producer snapshot and the managed ledger's close, metadata writes.  A bundle
release meanwhile (gateway/process/bundle_hooks.py) must not return before that close is done,
or the bundle's next owner opens the partition while this broker still writes its metadata
(one open lost to a version conflict).  Nor may a second ManagedLedger.close or
PartitionLog.close return while the first is still closing."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import trio

from gateway.process.bundle_hooks import BundleHooks
from ledger_backend.managed_ledger.factory import DEFAULT_ROOT
from ledger_backend.managed_ledger.metadata_format import managed_ledger_path
from protocols.kafka import record_batch as rb


def hold_ledger_close(ledger: Any) -> tuple[trio.Event, trio.Event]:
    """Holds `ledger`'s close at its first ledger finish: (started, release)."""
    started, release = trio.Event(), trio.Event()
    real_finish = ledger._finish_ledger

    async def held_finish(write_ledger: Any) -> None:
        started.set()
        await release.wait()
        await real_finish(write_ledger)

    ledger._finish_ledger = held_finish
    return started, release


async def all_ledgers_closed(store: Any, name: str) -> bool:
    data, _ = await store.get(managed_ledger_path(DEFAULT_ROOT, name))
    return all(ledger["closed"] for ledger in json.loads(data)["ledgers"])


async def test_a_second_close_returns_only_after_the_first(
        make_broker: Any, store: Any, autojump_clock: Any) -> None:  # noqa: ARG001
    topics = (await make_broker(idle_unload_s=0)).topics
    await topics.create_topic("twice", 2)
    for p, second_close in [(0, "ledger"), (1, "log")]:
        plog = await topics.partition("twice", p)
        await plog.append(rb.build_batch([(None, b"x")]))
        started, release = hold_ledger_close(plog.ledger)
        done: list[str] = []

        async def close_again(plog: Any = plog, which: str = second_close,
                              done: list[str] = done) -> None:
            await (plog.ledger if which == "ledger" else plog).close()
            done.append("second")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(plog.close)
            await started.wait()
            nursery.start_soon(close_again)
            await trio.sleep(5)
            early = list(done)
            release.set()  # (before asserting: a failed test must not hang on the held close)
        assert not early, f"a second {second_close} close returned during the first"
        assert done == ["second"]
        assert await all_ledgers_closed(store, f"public/default/twice-{p}")


class OneBundle:
    """The ownership of a one-bundle layout, as a release sees it."""

    layout = SimpleNamespace(bundles=1)

    def units_in_bundle(self, bundle: int) -> list[tuple[str, int]]:
        return []


async def test_a_bundle_release_waits_for_an_idle_unload_of_its_log(
        make_broker: Any, store: Any, autojump_clock: Any) -> None:  # noqa: ARG001
    topics = (await make_broker(idle_unload_s=0)).topics
    await topics.create_topic("idle", 1)
    plog = await topics.partition("idle", 0)
    await plog.append(rb.build_batch([(None, b"x")]))
    started, release = hold_ledger_close(plog.ledger)
    topics.use_tick += 5
    released: list[bool] = []
    async with trio.open_nursery() as nursery:
        hooks = BundleHooks(topics, nursery)
        hooks.ownership = OneBundle()  # type: ignore[assignment]
        hooks.groups = object()  # type: ignore[assignment]

        async def release_bundle() -> None:
            await hooks.releasing(0)
            released.append(await all_ledgers_closed(store, "public/default/idle-0"))

        nursery.start_soon(topics.unload_partition, ("idle", 0), plog, topics.use_tick - 1)
        await started.wait()
        assert ("idle", 0) not in topics.open_partitions()  # out of the open ones, closing
        nursery.start_soon(release_bundle)
        await trio.sleep(5)
        early = list(released)
        release.set()  # (before asserting: a failed test must not hang on the held close)
    assert not early, "the release returned while the unload still closed the log"
    assert released == [True]
    assert not topics.unloading_partitions()
