"""Which gone brokers' RocketMQ ports a cluster broker adopts (gateway/rocketmq/adoption.py),
and the SO_REUSEPORT listeners that let an adopter and the address's own broker overlap."""

from __future__ import annotations

import errno
from typing import Any

import pytest
import trio
import trio.testing

from gateway.rocketmq.adoption import PortAdoption, RocketMQAddress, claimed_by_another
from gateway.rocketmq.listener import open_shared_listener

ME = RocketMQAddress("127.0.0.1", 20000)


def reg(host: str, base: int, leaving: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {"rocketmq": {"host": host, "base_port": base}}
    if leaving:
        doc["leaving"] = True
    return doc


class FakePorts:
    """Records what is served; `refused` ports fail to bind as an address not of this host."""

    def __init__(self, refused: set[int] | None = None) -> None:
        self.serving: dict[int, str] = {}
        self.refused = refused or set()

    async def serve(self, bundle: int, host: str, port: int,
                    task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        if port in self.refused:
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
        self.serving[port] = host
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            del self.serving[port]


async def test_a_peer_gone_or_leaving_is_adopted_and_let_go_when_back() -> None:
    ports = FakePorts()
    adoption = PortAdoption(1, ME, "0.0.0.0", 2, ports.serve)
    async with trio.open_nursery() as nursery:
        adoption.follow({1: reg("127.0.0.1", 20000), 2: reg("127.0.0.1", 30000)}, nursery)
        await trio.testing.wait_all_tasks_blocked()
        assert ports.serving == {} and adoption.adopted == {}  # both alive: nothing adopted

        adoption.follow({1: reg("127.0.0.1", 20000)}, nursery)  # broker 2's session expired
        await trio.testing.wait_all_tasks_blocked()
        assert ports.serving == {30000: "0.0.0.0", 30001: "0.0.0.0"}  # our bind host
        assert adoption.adopted == {2: RocketMQAddress("127.0.0.1", 30000)}

        adoption.follow({1: reg("127.0.0.1", 20000), 2: reg("127.0.0.1", 30000)}, nursery)
        await trio.testing.wait_all_tasks_blocked()
        assert ports.serving == {} and adoption.adopted == {}  # back: its ports again

        adoption.follow({2: reg("127.0.0.1", 30000, leaving=True)}, nursery)  # SIGTERM
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(ports.serving) == [30000, 30001]
        nursery.cancel_scope.cancel()


async def test_grpc_ports_are_adopted_by_their_own_registration_key() -> None:
    """The 5.x gRPC ports (registered under "rocketmq_grpc") are adopted as the 4.x ones."""
    ports = FakePorts()
    adoption = PortAdoption(1, RocketMQAddress("127.0.0.1", 21000), "0.0.0.0", 2, ports.serve,
                            key="rocketmq_grpc")
    both = {**reg("127.0.0.1", 30000), "rocketmq_grpc": {"host": "127.0.0.1",
                                                          "base_port": 31000}}
    async with trio.open_nursery() as nursery:
        adoption.follow({1: {}, 2: both}, nursery)
        adoption.follow({1: {}}, nursery)  # broker 2 gone
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(ports.serving) == [31000, 31001]  # its gRPC ports, not its 4.x ones
        nursery.cancel_scope.cancel()


async def test_an_address_of_another_host_is_not_adopted() -> None:
    ports = FakePorts(refused={40000})
    adoption = PortAdoption(1, ME, "0.0.0.0", 2, ports.serve)
    async with trio.open_nursery() as nursery:
        adoption.follow({2: reg("10.9.9.9", 40000)}, nursery)
        adoption.follow({}, nursery)
        await trio.testing.wait_all_tasks_blocked()
        assert ports.serving == {} and adoption.adopted == {}
        nursery.cancel_scope.cancel()


async def test_a_peer_never_seen_alive_and_this_broker_are_never_adopted() -> None:
    ports = FakePorts()
    adoption = PortAdoption(1, ME, "0.0.0.0", 2, ports.serve)
    async with trio.open_nursery() as nursery:
        adoption.follow({1: reg("127.0.0.1", 20000, leaving=True), 3: {"node_id": 3}}, nursery)
        adoption.follow({}, nursery)
        await trio.testing.wait_all_tasks_blocked()
        assert ports.serving == {}
        nursery.cancel_scope.cancel()


def test_another_live_broker_with_the_same_address_is_a_conflict() -> None:
    assert claimed_by_another({2: reg("127.0.0.1", 20000)}, 1, ME) == 2
    assert claimed_by_another({1: reg("127.0.0.1", 20000)}, 1, ME) is None  # our old node
    assert claimed_by_another({2: reg("127.0.0.1", 20000, leaving=True)}, 1, ME) is None
    assert claimed_by_another({2: reg("127.0.0.1", 30000)}, 1, ME) is None


async def test_shared_listeners_overlap_and_a_plain_one_is_refused() -> None:
    first = await open_shared_listener("127.0.0.1", 0)
    port = first.socket.getsockname()[1]
    try:
        second = await open_shared_listener("127.0.0.1", port)
        await second.aclose()
        with pytest.raises(OSError) as refused:
            await trio.open_tcp_listeners(port, host="127.0.0.1")
        assert refused.value.errno == errno.EADDRINUSE
    finally:
        await first.aclose()
