"""A dead broker's bundles are taken over before its session ends when its Kafka port refuses
connections (gateway/cluster/peer_liveness.py), on the in-memory metadata store, where a
session never expires on its own: any take-over here is the expulsion's.  A broker whose port
refuses while it is alive is expelled too and steps down cleanly (drops and releases every
bundle, registers again); a stopped broker (its port still accepts) keeps its bundles until
its session ends."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from gateway.cluster import peer_liveness
from gateway.cluster.broker_registry import LIVE_BROKERS_PATH, read_bundle_owners
from gateway.cluster.peer_liveness import port_refuses
from ledger_backend.metadata import open_store
from tests.cluster.memory_brokers import LAYOUT, MemoryBroker, cluster_name, wait_owners


class Broker(MemoryBroker):
    """An ownership service with a real listening port standing for its Kafka listener; its
    store (session) stays open when the service is cancelled, as a killed process's session
    outlives it."""

    def __init__(self, node_id: int, name: str) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)  # never accepted: the backlog answers, like a stopped process
        super().__init__(node_id, name, self.listener.getsockname()[1])
        self.exited = trio.Event()  # the service and all its tasks have ended

    async def run(self) -> None:
        try:
            await self.run_service(handback_delay_s=0.0, expel_refusing=True)
        finally:
            self.exited.set()

    async def wait_probed(self, timeout_s: float = 30.0) -> None:
        """Until a peer's probe has connected (only a port seen accepting can be taken for
        dead)."""
        self.listener.setblocking(False)
        with trio.fail_after(timeout_s):
            while True:
                try:
                    self.listener.accept()[0].close()
                    return
                except BlockingIOError:
                    await trio.sleep(0.05)

    def refuse(self) -> None:
        self.listener.close()  # connections to the port are now reset (ECONNREFUSED)

    async def close(self) -> None:
        """End the service, then (its tasks gone, none left reading) its session."""
        self.scope.cancel()
        self.listener.close()
        if self.store is not None:
            with trio.CancelScope(shield=True):
                with trio.fail_after(30):
                    await self.exited.wait()
                await self.store.close()


@asynccontextmanager
async def two_brokers(two_unreachable: bool = False
                      ) -> AsyncIterator[tuple[Any, Broker, Broker, dict[int, int]]]:
    """Brokers 1 and 2 sharing the bundles; both closed (sessions ended) on the way out.
    `two_unreachable`: broker 2's port refuses from the start."""
    name = cluster_name("liveness")
    admin = await open_store(f"memory:{name}")
    one, two = Broker(1, name), Broker(2, name)
    if two_unreachable:
        two.refuse()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(one.run)
        nursery.start_soon(two.run)
        try:
            yield admin, one, two, await wait_owners(admin, {1, 2})
        finally:
            await one.close()
            await two.close()
            await admin.close()


async def test_a_port_refuses_only_when_nothing_listens() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    try:
        assert not await port_refuses("127.0.0.1", port)  # bound, never accepted: alive
    finally:
        listener.close()
    assert await port_refuses("127.0.0.1", port)
    assert not await port_refuses("no-such-host.invalid", port)  # not a refusal


async def test_a_killed_broker_is_taken_over_before_its_session_ends(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "ledgerwire")
    async with two_brokers() as (admin, one, two, _):
        await two.wait_probed()
        two.scope.cancel()  # the process is gone; its session (store) lives on
        two.refuse()
        # the memory store's session never expires: only the expulsion can free them
        await wait_owners(admin, {1})
        assert await admin.exists(f"{LIVE_BROKERS_PATH}/2") is None
        assert "broker 2 refused connections" in caplog.text
    assert "Traceback" not in caplog.text


async def test_a_live_broker_whose_port_refuses_steps_down_cleanly(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.INFO, "ledgerwire")
    monkeypatch.setattr(peer_liveness, "EXPEL_AGAIN_AFTER_S", 0.0)
    async with two_brokers() as (admin, one, two, owners):
        assert one.service is not None and two.service is not None
        one.service._handback_delay_s = 3600.0  # keep what it takes over (no hand-back)
        held = {b for b, o in owners.items() if o == 2}
        with trio.fail_after(30):
            while True:  # every bundle it claimed is loaded
                if two.service.owned_bundles():
                    break
                await trio.sleep(0.02)
        await two.wait_probed()
        two.refuse()  # alive, its session valid, but its port refuses
        await wait_owners(admin, {1})
        with trio.fail_after(30):  # it saw its node gone, stepped down, registered again
            while True:
                if set(two.released) >= held and two.service.lease_valid() \
                        and await admin.exists(f"{LIVE_BROKERS_PATH}/2") is not None:
                    break
                await trio.sleep(0.05)
        # it serves nothing and holds nothing: it acknowledges no write of those bundles
        assert two.service.owned_bundles() == set()
        assert not any(two.service.bundle_is_local(b) for b in range(LAYOUT.bundles))
        assert not any(two.service.holds_bundle(b) for b in range(LAYOUT.bundles))
        assert set((await read_bundle_owners(admin)).values()) == {1}
        assert "registration was removed by another broker" in caplog.text
        # registered again, its port still refusing: never seen accepting since, so it is
        # not expelled again (a port refusing only this peer costs one expulsion)
        await trio.sleep(1.5)
        assert await admin.exists(f"{LIVE_BROKERS_PATH}/2") is not None
        assert caplog.text.count("broker 2 refused connections") == 1
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_stopped_broker_keeps_its_bundles_until_its_session_ends() -> None:
    async with two_brokers() as (admin, one, two, owners):
        two.scope.cancel()  # frozen (SIGSTOP): its port still accepts into the backlog
        await trio.sleep(2.5)  # ten probe rounds
        assert await read_bundle_owners(admin) == owners
        assert await admin.exists(f"{LIVE_BROKERS_PATH}/2") is not None


async def test_a_port_never_reached_from_here_is_not_taken_for_dead() -> None:
    """An advertised address a broker cannot reach at all (e.g. one valid only outside its
    container) refuses from the start: left to the session, never expelled."""
    async with two_brokers(two_unreachable=True) as (admin, _, _, owners):
        await trio.sleep(2.5)  # ten probe rounds
        assert await read_bundle_owners(admin) == owners
        assert await admin.exists(f"{LIVE_BROKERS_PATH}/2") is not None
