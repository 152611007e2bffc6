"""Adopting the RocketMQ bundle ports of a broker that died or is leaving.

A RocketMQ 4.x client learns where a broker name lives only from its route refresh (the C++
client: a 30 s timer; a failed send retries another queue but never refreshes), so after a
broker dies its clients keep the dead address for every queue it served: those queues take no
send until the refresh.  Instead, a surviving broker binds the gone broker's bundle ports
itself (bundle b on the gone broker's base port + b) and serves them like its own: a request
for a bundle it now owns is served, one for a bundle another broker owns is forwarded
(gateway/rocketmq/forwarding.py).  The client's next connect to the old address reaches the
survivor, so every queue takes sends again as soon as its bundle has a new owner.

Bundle ports of cluster brokers are bound with SO_REUSEPORT, so an adopter can bind them while
a leaving broker (SIGTERM) still drains, and a restarted broker can bind them back while its
adopter still holds them; the adopter lets go once the broker is registered again (and not
leaving).  The kernel then spreads new connections over both; either one serves or forwards.

RocketMQ 5 clients (gRPC) are held the same way by their 30 s route refresh, so the gRPC
ports (bundle b on the gRPC base port + b, registered under "rocketmq_grpc") are adopted by a
second PortAdoption just like the 4.x remoting ports.

Only addresses this machine can bind are adopted: the gone broker advertised this broker's own
host (brokers sharing a host), or an address that moved here (a floating IP).  Any other one is
left alone (one INFO line) and its clients wait for their route refresh.

This module must never adopt the address of a broker that is registered and not leaving, nor
serve a request itself (the adopted ports use the same bundle brokers and routers).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

log = logging.getLogger("ledgerwire.rocketmq.adoption")

REGISTRATION_KEY = "rocketmq"
RETRY_BIND_S = 0.1
BIND_ATTEMPTS = 50  # a leaving broker's port may still be bound without SO_REUSEPORT: 5 s

# serve(bundle, bind host, port, task_status): serve that bundle's broker on host:port
ServePort = Callable[..., Awaitable[None]]


@dataclass(frozen=True)
class RocketMQAddress:
    host: str
    base_port: int


def rocketmq_address(doc: Mapping[str, Any], key: str = REGISTRATION_KEY
                     ) -> RocketMQAddress | None:  # fmt: skip
    """The RocketMQ host and base port a live registration advertises under `key` (4.x
    remoting by default; the 5.x gRPC ports under theirs), if any."""
    entry = doc.get(key)
    if not isinstance(entry, dict):
        return None
    try:
        return RocketMQAddress(str(entry["host"]), int(entry["base_port"]))
    except (KeyError, TypeError, ValueError):
        return None


def claimed_by_another(registrations: Mapping[int, Mapping[str, Any]], me: int,
                       mine: RocketMQAddress) -> int | None:
    """The node id of another live broker advertising this broker's RocketMQ address (two
    brokers configured with the same ports on one host), else None."""
    for node_id, doc in registrations.items():
        if node_id != me and not doc.get("leaving") and rocketmq_address(doc) == mine:
            return node_id
    return None


class PortAdoption:
    """Which gone brokers' bundle ports this broker serves (see the module docstring)."""

    def __init__(self, me: int, mine: RocketMQAddress, bind_host: str, bundles: int,
                 serve: ServePort, *, key: str = REGISTRATION_KEY) -> None:
        self._key = key  # which ports: 4.x remoting ("rocketmq") or 5.x gRPC
        self._me = me
        self._mine = mine
        self._bind_host = bind_host
        self._bundles = bundles
        self._serve = serve
        self._known: dict[int, RocketMQAddress] = {}  # last address each live peer advertised
        self._adopted: dict[int, tuple[RocketMQAddress, trio.CancelScope]] = {}

    @property
    def adopted(self) -> dict[int, RocketMQAddress]:
        return {node_id: address for node_id, (address, _) in self._adopted.items()}

    def follow(self, registrations: Mapping[int, Mapping[str, Any]],
               nursery: trio.Nursery) -> None:
        """Adopt the ports of every known peer now gone or leaving; let go of the ports of
        a peer registered again."""
        for node_id, doc in registrations.items():
            address = rocketmq_address(doc, self._key)
            if node_id == self._me or address is None or address == self._mine:
                continue
            if doc.get("leaving"):
                self._adopt(node_id, address, nursery)
            else:
                self._known[node_id] = address
                self._let_go(node_id)
        for node_id in [n for n in self._known if n not in registrations]:
            self._adopt(node_id, self._known.pop(node_id), nursery)

    def _adopt(self, node_id: int, address: RocketMQAddress, nursery: trio.Nursery) -> None:
        if node_id in self._adopted:
            return
        host = self._bind_host if address.host == self._mine.host else address.host
        scope = trio.CancelScope()
        self._adopted[node_id] = (address, scope)
        nursery.start_soon(self._serve_adopted, node_id, address, host, scope)

    def _let_go(self, node_id: int) -> None:
        entry = self._adopted.pop(node_id, None)
        if entry is not None:
            log.info("broker %d is back: its %s ports are its own again", node_id, self._key,
                     extra={"address": f"{entry[0].host}:{entry[0].base_port}"})
            entry[1].cancel()

    async def _serve_adopted(self, node_id: int, address: RocketMQAddress, host: str,
                             scope: trio.CancelScope) -> None:
        with scope:
            async with trio.open_nursery() as nursery:
                for bundle in range(self._bundles):
                    if not await self._bind(nursery, bundle, host, address.base_port + bundle):
                        nursery.cancel_scope.cancel()
                        if self._adopted.get(node_id, (None, None))[1] is scope:
                            del self._adopted[node_id]
                        return
                log.info("serving the %s ports of gone broker %d", self._key, node_id, extra={
                    "address": f"{address.host}:{address.base_port}+bundle",
                    "bundles": self._bundles})

    async def _bind(self, nursery: trio.Nursery, bundle: int, host: str, port: int) -> bool:
        for _ in range(BIND_ATTEMPTS):
            try:
                await nursery.start(self._serve, bundle, host, port)
                return True
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:  # not an address of this machine
                    log.info("cannot adopt rocketmq port %s:%d (%s); its clients wait for "
                             "their route refresh", host, port, exc.strerror)
                    return False
            await trio.sleep(RETRY_BIND_S)
        log.info("rocketmq port %s:%d still in use; not adopted", host, port)
        return False
