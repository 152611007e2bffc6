"""Noticing a dead broker before its ZooKeeper session ends: its advertised Kafka port refuses.

A broker killed with SIGKILL (or one that crashed) keeps its ZooKeeper nodes until its session
expires (the session timeout, rounded up to ZooKeeper's tick), so its bundles wait that long for
a new owner.  But its process is gone at once, and the kernel answers a connection to its
listening port with a reset (ECONNREFUSED) from the first moment.  A broker that is alive
binds its Kafka listener before it registers and closes it only after it deregistered
(gateway/process/cluster_broker.py), so while its live node exists its port accepts.  A
SIGSTOPped broker's port still accepts (the kernel completes the handshake into the listen
backlog), and a partitioned or overloaded one's connections time out: neither is a refusal.

So each broker probes every other registered broker's advertised Kafka port a few times a
second (`PeerProbe`).  Only a port that accepted a probe from this broker before counts (an
address this broker cannot reach, e.g. one valid only outside its container, is left to the
session), and only when it refused CONFIRMATIONS times in a row, PROBE_GAP_S
apart, and that broker's live node is still the one it had when the first refusal was seen
(same creation time), does it *expel* the broker (`expel_broker`): one ZooKeeper transaction
deletes that live node and every bundle node naming that broker, each at the version just read.
ZooKeeper lets any client delete another session's ephemeral node; deleting them is what the
session's expiry would do a few seconds later, and the normal take-over follows (the target
brokers claim the bundles, and opening each managed ledger fences the old owner's ledgers).

Safety never rests on this guess: if the expelled broker is in fact alive (its port refused
for another reason), every acknowledged message is still kept.  It cannot append to a ledger
the new owner fenced, and what it acknowledged before the fence is recovered by the new owner;
it acknowledges only under its ownership lease, which it can no longer renew (its live node is
gone), and it steps down as soon as it sees its live node gone (OwnershipService), registering
again through the normal path.  A broker is expelled at most once per EXPEL_AGAIN_AFTER_S.

This module must never expel a broker on a timeout or on any error but a refused connection,
nor delete nodes of a registration other than the one whose port refused (creation time and
version checked in one transaction).
"""

from __future__ import annotations

import enum
import errno
import json
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

import trio

from gateway.cluster.broker_registry import BUNDLES_PATH, LIVE_BROKERS_PATH
from ledger_backend.metadata.store import DeleteOp, MetadataError, MetadataStore, NoNodeError
from protocols.kafka.broker_api import BrokerEndpoint

log = logging.getLogger("ledgerwire.ownership")

PROBE_INTERVAL_S = 0.25  # each registered peer's port, this often
PROBE_GAP_S = 0.15  # between the refusals that confirm one
CONFIRMATIONS = 3  # refusals in a row, none answered otherwise
CONNECT_TIMEOUT_S = 1.0  # a probe not refused by then counts as "alive" (never as dead)
EXPEL_AGAIN_AFTER_S = 30.0  # one broker is expelled at most this often


class PortState(enum.Enum):
    ACCEPTS = "accepts"  # a connection was made: a process holds the port
    REFUSES = "refuses"  # every address reset the connection: nothing listens
    UNKNOWN = "unknown"  # timed out, unreachable, unresolvable: never taken as dead


async def probe_port(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> PortState:
    """One TCP connect to every address of host:port (closed at once)."""
    try:
        with trio.fail_after(timeout_s):
            infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, trio.TooSlowError):
        return PortState.UNKNOWN
    if not infos:
        return PortState.UNKNOWN
    for family, type_, proto, _, address in infos:
        sock = trio.socket.socket(family, type_, proto)
        try:
            with trio.move_on_after(timeout_s):
                await sock.connect(address)
                return PortState.ACCEPTS
            return PortState.UNKNOWN  # stopped, partitioned or busy: never taken as dead
        except OSError as exc:
            if exc.errno != errno.ECONNREFUSED:
                return PortState.UNKNOWN
        finally:
            sock.close()
    return PortState.REFUSES


async def port_refuses(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """True only if a TCP connection to every address of host:port was refused (a reset);
    False if one connected, timed out, or failed any other way."""
    return await probe_port(host, port, timeout_s) is PortState.REFUSES


async def registration_ctime(store: MetadataStore, node_id: int) -> int | None:
    """The creation time (ms) of the broker's live node, None if it has none."""
    stat = await store.exists(f"{LIVE_BROKERS_PATH}/{node_id}")
    return stat.ctime_ms if stat is not None and stat.ephemeral else None


async def expel_broker(store: MetadataStore, node_id: int, ctime_ms: int) -> list[int] | None:
    """Delete broker `node_id`'s live node, if it is still the one created at `ctime_ms`, and
    every bundle node naming it, in one transaction at the versions read; the bundles freed,
    or None if nothing was deleted (the node changed, or the transaction met a change)."""
    live_path = f"{LIVE_BROKERS_PATH}/{node_id}"
    try:
        _, stat = await store.get(live_path)
    except NoNodeError:
        return None
    if stat.ctime_ms != ctime_ms or not stat.ephemeral:
        return None
    ops = [DeleteOp(live_path, stat.version)]
    bundles: list[int] = []
    for name in await store.children(BUNDLES_PATH):
        if not name.isdigit():
            continue
        try:
            data, bundle_stat = await store.get(f"{BUNDLES_PATH}/{name}")
        except NoNodeError:
            continue
        if int(json.loads(data).get("node_id", -1)) == node_id:
            ops.append(DeleteOp(f"{BUNDLES_PATH}/{name}", bundle_stat.version))
            bundles.append(int(name))
    try:
        await store.multi(ops)
    except MetadataError as exc:  # a node changed or went meanwhile: its session ended
        log.info("broker %d not expelled: %r", node_id, exc)
        return None
    return sorted(bundles)


@dataclass
class PeerProbe:
    """Probes the other registered brokers' Kafka ports and expels one whose port refuses
    (see the module docstring).  `peers` gives the brokers to probe now (registered, not
    leaving, not this one); `may_act` whether this broker may act now (its own lease valid);
    `on_expelled` is told each expulsion."""

    store: MetadataStore
    peers: Callable[[], dict[int, BrokerEndpoint]]
    may_act: Callable[[], bool]
    on_expelled: Callable[[int], None]
    clock: Callable[[], float] = trio.current_time

    def __post_init__(self) -> None:
        self._expelled_at: dict[int, float] = {}
        self._busy: set[int] = set()
        # node id -> the endpoint seen accepting a probe from here: only a port that accepted
        # can be taken as dead (one this broker cannot reach at all, e.g. an address valid
        # only outside its container, refuses from the start and is left to the session)
        self._accepted: dict[int, BrokerEndpoint] = {}

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                await trio.sleep(PROBE_INTERVAL_S)
                if not self.may_act():
                    continue
                now = self.clock()
                for node_id, endpoint in self.peers().items():
                    if node_id in self._busy or endpoint.port <= 0:
                        continue
                    if now - self._expelled_at.get(node_id, -EXPEL_AGAIN_AFTER_S) \
                            < EXPEL_AGAIN_AFTER_S:
                        continue
                    self._busy.add(node_id)
                    nursery.start_soon(self._probe, node_id, endpoint)

    async def _probe(self, node_id: int, endpoint: BrokerEndpoint) -> None:
        try:
            state = await probe_port(endpoint.host, endpoint.port)
            if state is PortState.ACCEPTS:
                self._accepted[node_id] = endpoint
            if state is not PortState.REFUSES or self._accepted.get(node_id) != endpoint:
                return
            ctime = await registration_ctime(self.store, node_id)
            if ctime is None:
                return
            for _ in range(CONFIRMATIONS - 1):
                await trio.sleep(PROBE_GAP_S)
                if not await port_refuses(endpoint.host, endpoint.port):
                    return
            if not self.may_act() or node_id not in self.peers():
                return
            bundles = await expel_broker(self.store, node_id, ctime)
            if bundles is None:
                return
            self._expelled_at[node_id] = self.clock()
            # its next registration must be seen accepting before it can be expelled again:
            # a port that refuses only this broker (a firewall rejecting it) costs one
            # expulsion, not one every EXPEL_AGAIN_AFTER_S
            self._accepted.pop(node_id, None)
            log.warning("broker %d refused connections on %s:%d (%d probes): expelled it "
                        "before its session ended; its %d bundles are taken over",
                        node_id, endpoint.host, endpoint.port, CONFIRMATIONS, len(bundles),
                        extra={"bundles": bundles})
            self.on_expelled(node_id)
        except MetadataError as exc:  # ZooKeeper unreachable: the session decides, as before
            log.debug("probing broker %d: %r", node_id, exc)
        finally:
            self._busy.discard(node_id)
