"""Partition ownership in a cluster: bundles of partitions, each owned by one live broker.

Scheme (after Pulsar's namespace bundles).  A cluster has a fixed number of bundles (layout
node, broker_registry.py).  Topic partition (t, p) lives in bundle (crc32(t) + p) mod B, so
consecutive partitions of a topic land in consecutive bundles and spread over brokers; the
group-coordinator partitions ("__consumer_offsets", i) and transaction-coordinator partitions
("__transaction_state", i) are placed the same way.  RocketMQ's internal topics (retry,
dead-letter, delay and transaction topics) are "bundle-pinned": partition p in bundle p mod B,
so what one bundle's RocketMQ broker writes to them stays in that bundle
(gateway/rocketmq/cluster.py).
A bundle's owner holds the ephemeral node /ledgerwire/ownership/bundles/<b>; which broker
*should* own it is decided by rendezvous hashing over the live, non-draining brokers: every
broker computes the same answer from the same lists without talking to the others, and a
broker joining or leaving moves only the bundles it wins or held (about 1/n of them), which
keeps ledger recoveries few.

Acquiring a bundle is creating its node; the target broker does it when the node is absent.
Ownership is sticky: an owner keeps a bundle whose target became another broker (a broker
joined or came back after a crash) until that broker has been live for `handback_delay_s`, then
hands such bundles over one per round, gracefully; so a failover moves each bundle once, and a
restarted broker gets its share back only by this load-balancing hand-off, not by pulling. A
draining or leaving (SIGTERM) owner hands everything over at once. A broker answers where a
bundle lives only after its first reconcile (before that it knows no other broker and would
send every client to itself).
Brokers started together (the workers of `standalone --workers N`, `awaited_brokers`) leave
alone, for up to `await_s` after this broker's start, an unowned bundle that rendezvous gives
to one of them not yet seen live: it claims that bundle itself once it registers, instead of
the first to start taking every bundle and handing most back one per round after the delay
(each a NOT_LEADER answer, a close and a reopen).  A broker once seen live is never awaited
again, so a failover is not slowed.
Releasing (a broker joined, or `admin drain`) is: stop answering for the bundle, run the
release hook (close its partition logs and coordinators, so ledgers are closed cleanly and
the next owner needs no recovery), then delete the node.  A dead owner's nodes vanish with its
session and the target takes over; opening the managed ledger fences the dead owner's ledger.

A dead broker is noticed before its session ends when its advertised Kafka port refuses
connections: another broker then deletes its live and bundle nodes (gateway/cluster/
peer_liveness.py, `expel_refusing`), and the take-over above follows at once.  A broker that
finds its own live node gone while its session lives steps down as after a lost session and
registers again.

Safety does not rest on ZooKeeper timing: the storage layer fences a deposed owner.  On top of
that, `is_local` is a *lease*: it is true only while a ZooKeeper round trip started less than
LEASE_FRACTION of the session timeout ago proved this broker's session alive (a session cannot
expire sooner than a full timeout after its last contact).  A broker paused past its session
(SIGSTOP) therefore sees its lease lapse the moment it runs again and refuses to acknowledge
anything, before kazoo even reports the lost session; then it drops every bundle.

This module must never delete a bundle node it does not own, and never report a bundle as
local without a valid lease.
"""

from __future__ import annotations

import hashlib
import json
import logging
import zlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio

from gateway.cluster.broker_registry import (
    BUNDLES_PATH,
    DRAINING_BROKERS_PATH,
    LIVE_BROKERS_PATH,
    ClusterLayout,
    deregister_broker,
    endpoint_from_doc,
    read_bundle_owners,
    read_draining,
    read_live_registrations,
    register_broker,
)
from gateway.cluster.peer_liveness import PeerProbe, registration_ctime
from ledger_backend.faults import log_failure
from ledger_backend.metadata.store import (
    BadVersionError,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    SessionState,
)
from protocols.kafka.broker_api import BrokerEndpoint

log = logging.getLogger("ledgerwire.ownership")

GROUP_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"
LEASE_FRACTION = 0.6
RECONCILE_INTERVAL_S = 2.0
HANDBACK_DELAY_S = 15.0  # a (re)joined broker must be live this long before bundles move to it
# a broker that left is still listed to clients this long (or until it is live again): see
# `listed_brokers`
DEPARTED_LISTING_S = 60.0
# a topic named in a Metadata request this recently is in demand on a take-over: a client
# whose partition's broker died asks every second or so until the take-over (a longer window
# let a chaos.py trial's open queue behind the topics of earlier trials, read back since)
ASKED_RECENTLY_S = 5.0

BundleHook = Callable[[int], Awaitable[None]]


# RocketMQ's internal topics (storage names: '%' -> '.'): retry, dead-letter, delay-level and
# transaction topics.  Their partition p lives in bundle p mod B ("bundle-pinned"), so what a
# bundle's RocketMQ broker writes to them (retries, delays) stays in that bundle.
BUNDLE_PINNED_PREFIXES = (".RETRY.", ".DLQ.", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_")


def is_bundle_pinned(topic: str) -> bool:
    return topic.startswith(BUNDLE_PINNED_PREFIXES)


def bundle_of(topic: str, partition: int, bundles: int) -> int:
    if is_bundle_pinned(topic):
        return partition % bundles
    return (zlib.crc32(topic.encode("utf-8")) + partition) % bundles


def coordinator_partition(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode("utf-8")) % partitions


def target_broker(bundle: int, eligible: list[int]) -> int | None:
    """Rendezvous (highest random weight) choice of a bundle's broker among `eligible`."""
    if not eligible:
        return None

    def weight(node_id: int) -> bytes:
        return hashlib.blake2b(f"{bundle}/{node_id}".encode(), digest_size=8).digest()

    return max(eligible, key=weight)


def eligible_brokers(live: set[int], draining: set[int]) -> list[int]:
    """Live brokers not draining; all live ones if every one of them is draining."""
    return sorted(live - draining) or sorted(live)


class OwnershipService:
    """This broker's view and share of bundle ownership (see the module docstring)."""

    def __init__(self, store: MetadataStore, layout: ClusterLayout, me: BrokerEndpoint, *,
                 session_timeout_s: float, on_acquired: BundleHook | None = None,
                 on_releasing: BundleHook | None = None,
                 clock: Callable[[], float] = trio.current_time,
                 handback_delay_s: float = HANDBACK_DELAY_S,
                 expel_refusing: bool = False, awaited_brokers: Iterable[int] = (),
                 await_s: float = 0.0) -> None:
        self._store = store
        self.layout = layout
        self.me = me
        self._session_timeout_s = session_timeout_s
        self._on_acquired = on_acquired
        self._on_releasing = on_releasing
        self._clock = clock
        self._handback_delay_s = handback_delay_s
        self._expel_refusing = expel_refusing  # see gateway/cluster/peer_liveness.py
        # started with this broker, not yet seen live: their bundles are left to them until
        # _await_until (set by the first round)
        self._awaited = set(awaited_brokers) - {me.node_id}
        self._await_s = await_s
        self._await_until: float | None = None
        self._leaving: set[int] = set()  # registered brokers that said they are leaving
        self._stepping_down = trio.Lock()  # one step-down (and registering again) at a time
        self._registered_ctime: int | None = None  # creation time of the live node made last
        self._live: dict[int, BrokerEndpoint] = {me.node_id: me}
        self._live_since: dict[int, float] = {}  # node id -> when this broker first saw it live
        self._departed: dict[int, tuple[BrokerEndpoint, float]] = {}  # left: endpoint, when
        self._reconciled = False  # no answer about other brokers' bundles before the first
        self._draining: set[int] = set()
        self._owners: dict[int, int] = {}  # bundle -> owner node id (last read)
        self._owned: set[int] = set()  # bundles whose node this session holds
        self._ready: set[int] = set()  # owned bundles whose acquire hook finished
        # partitions of owned bundles still loading that were opened (fenced, recovered)
        # after the bundle was acquired: Kafka produce and fetch are served on them at once
        self._opened_early: dict[int, set[tuple[str, int]]] = {}
        self._ready_changed = trio.Event()  # set (and replaced) when a bundle is ready or lost
        self._releasing: set[int] = set()
        self._lease_until = -1.0
        self._session_epoch = 0
        self._dirty = trio.Event()
        self._stopping = False
        self.changed = trio.Event()  # set (and replaced) after every reconcile round
        # more fields of the live node (e.g. the RocketMQ listener), set before run()
        self.registration_extra: dict[str, object] = {}
        # told every live registration as each round reads them, before it loads a bundle
        # (a gone broker's ports are adopted at once: gateway/rocketmq/adoption.py)
        self.registration_observers: list[Callable[[dict[int, dict[str, Any]]], None]] = []
        # told (bundle, topic, partition) when a request waits for a partition of a bundle
        # still loading here (see until_local)
        self.on_awaited: Callable[[int, str, int], None] | None = None
        self._asked: dict[str, float] = {}  # topic -> when a client last asked where it lives

    # --- what handlers ask -----------------------------------------------------------------

    def lease_valid(self) -> bool:
        return self._clock() < self._lease_until

    @property
    def answers_clients(self) -> bool:
        """False until the first reconcile: a (re)starting broker knows neither the other
        brokers nor any owner, and a Metadata answer then named no leader for any partition
        and listed itself at port 0 (its endpoint before the listener was bound).  A client
        that reached a broker restarted after a kill -9 while it waited out its old
        registration applied that and stalled until a later answer (chaos.py: 7.7 s)."""
        return self._reconciled

    def live_brokers(self) -> list[BrokerEndpoint]:
        return [self._live[i] for i in sorted(self._live)]

    def listed_brokers(self) -> list[BrokerEndpoint]:
        """The brokers a Metadata answer lists: the live ones and those that left less than
        DEPARTED_LISTING_S ago.  librdkafka (2.x) drops a broker missing from the list in the
        same update that moves its partitions to their new leader, and the dropped broker's
        thread then sets those partitions back to "no leader" (its debug log: "Reverting from
        preferred replica 1 to leader -1"), so they waited for the client's next refresh, up
        to a second more after every broker kill (chaos.py).  A dead broker's node and its
        bundle nodes vanish with the same session, so the survivor names itself leader in the
        very answer that would have dropped the dead broker; listed a while longer, it is just
        a broker the client fails to reach and leads nothing."""
        now = self._clock()
        listed = dict(self._live)
        for node_id, (endpoint, left_at) in self._departed.items():
            if node_id not in listed and now - left_at < DEPARTED_LISTING_S:
                listed[node_id] = endpoint
        return [listed[i] for i in sorted(listed)]

    def note_asked(self, topics: Iterable[str]) -> None:
        """Clients asked where these topics live (a Metadata request naming them): a client
        whose partition's broker died asks every second, so on a take-over they are the
        partitions to open first (`recently_asked`)."""
        now = self._clock()
        for topic in topics:
            self._asked[topic] = now
        if len(self._asked) > 4096:
            self._asked = {t: at for t, at in self._asked.items()
                           if now - at < ASKED_RECENTLY_S}

    def recently_asked(self) -> set[str]:
        now = self._clock()
        return {t for t, at in self._asked.items() if now - at < ASKED_RECENTLY_S}

    def _owner_of_bundle(self, bundle: int) -> BrokerEndpoint | None:
        if bundle in self._owned:
            return self.me
        if not self._reconciled:
            return None  # not registered yet: every guess would name this broker
        owner = self._owners.get(bundle)
        if owner is None or owner == self.me.node_id:
            target = target_broker(bundle, eligible_brokers(set(self._live), self._draining))
            owner = target
        return self._live.get(owner) if owner is not None else None

    def _bundle_is_local(self, bundle: int) -> bool:
        return bundle in self._ready and bundle not in self._releasing and self.lease_valid()

    def bundle_of(self, topic: str, partition: int) -> int:
        return bundle_of(topic, partition, self.layout.bundles)

    def partition_opened(self, bundle: int, topic: str, partition: int) -> None:
        """The broker opened this partition of a bundle it is still loading, after acquiring
        it (the open fenced and recovered the earlier owner's ledgers): from now on
        `serves_partition` is true for it, before the bundle's coordinators and extensions
        are loaded.  Ignored for a bundle this broker does not hold."""
        if self.holds_bundle(bundle) and bundle not in self._ready:
            self._opened_early.setdefault(bundle, set()).add((topic, partition))
            self._wake_ready_waiters()

    def serves_partition(self, topic: str, partition: int) -> bool:
        """Whether Kafka produce and fetch may be served on this topic partition here: its
        bundle is local, or held (lease valid, not releasing) and this partition was opened
        since it was acquired (`partition_opened`).  A plain append or read needs only the
        partition's own log; coordinator partitions, share-group state and transaction
        markers wait for the whole bundle (`is_local`).  A failover's take-over pause is then
        the partition's own open, not the slowest load of its bundle."""
        bundle = self.bundle_of(topic, partition)
        if self._bundle_is_local(bundle):
            return True
        return ((topic, partition) in self._opened_early.get(bundle, ())
                and self.holds_bundle(bundle) and self.lease_valid())

    def bundle_owner(self, bundle: int) -> BrokerEndpoint | None:
        """The live broker owning (or about to own) `bundle`, None if none is live."""
        return self._owner_of_bundle(bundle)

    def bundle_is_local(self, bundle: int) -> bool:
        return self._bundle_is_local(bundle)

    def owner_of(self, topic: str, partition: int) -> BrokerEndpoint | None:
        return self._owner_of_bundle(self.bundle_of(topic, partition))

    def leader_table(self) -> list[int]:
        """Each bundle's owner node id (-1: none live), as `owner_of` answers now: read once
        per Metadata request, so listing 100,000 partitions asks no question per partition."""
        owners = (self._owner_of_bundle(b) for b in range(self.layout.bundles))
        return [owner.node_id if owner is not None else -1 for owner in owners]

    def partition_leaders(self, topic: str, partitions: int,
                          table: list[int]) -> tuple[int, ...]:
        """Every partition's leader from a `leader_table` (the same rule as `bundle_of`)."""
        bundles = len(table)
        base = 0 if is_bundle_pinned(topic) else zlib.crc32(topic.encode("utf-8"))
        return tuple(table[(base + p) % bundles] for p in range(partitions))

    def is_local(self, topic: str, partition: int) -> bool:
        return self._bundle_is_local(self.bundle_of(topic, partition))

    def coordinator_unit(self, key_type: int, key: str) -> tuple[str, int]:
        if key_type == 1:
            return TXN_TOPIC, coordinator_partition(key, self.layout.txn_partitions)
        return GROUP_TOPIC, coordinator_partition(key, self.layout.group_partitions)

    def coordinator_owner(self, key_type: int, key: str) -> BrokerEndpoint | None:
        return self.owner_of(*self.coordinator_unit(key_type, key))

    def coordinator_is_local(self, key_type: int, key: str) -> bool:
        return self.is_local(*self.coordinator_unit(key_type, key))

    def holds_bundle(self, bundle: int) -> bool:
        """This broker holds the bundle's node (also while its acquisition hooks run, before it
        serves requests): what a hook checks after waiting, to not load a bundle it lost."""
        return bundle in self._owned and bundle not in self._releasing

    async def until_ready(self, bundle: int, timeout_s: float) -> bool:
        """Wait while this broker holds `bundle` but still loads it (its acquire hooks fence
        and recover the earlier owner's ledgers); True once it serves the bundle.  A request
        that reaches the new owner in that window waits here instead of failing: clients
        retry a refusal only a few times, and a load after a kill -9 can outlast them."""
        with trio.move_on_after(timeout_s):
            while self.holds_bundle(bundle) and not self._bundle_is_local(bundle):
                await self._ready_changed.wait()
        return self._bundle_is_local(bundle)

    async def until_local(self, topic: str, partition: int, timeout_s: float) -> bool:
        """`until_ready` for a partition's bundle; a partition a request waits for is first
        handed to `on_awaited` (the broker opens it at once, not after the bundle's other
        partitions), so its fencing and recovery overlap the bundle's load."""
        bundle = self.bundle_of(topic, partition)
        if self.on_awaited is not None and self.holds_bundle(bundle) \
                and not self._bundle_is_local(bundle):
            self.on_awaited(bundle, topic, partition)
        return await self.until_ready(bundle, timeout_s)

    async def until_serving(self, topic: str, partition: int, timeout_s: float) -> bool:
        """`until_local` for Kafka produce and fetch: done as soon as `serves_partition`."""
        bundle = self.bundle_of(topic, partition)
        if self.on_awaited is not None and self.holds_bundle(bundle) \
                and not self.serves_partition(topic, partition):
            self.on_awaited(bundle, topic, partition)
        with trio.move_on_after(timeout_s):
            while self.holds_bundle(bundle) and not self.serves_partition(topic, partition):
                await self._ready_changed.wait()
        return self.serves_partition(topic, partition)

    def _drop_bundle(self, bundle: int) -> None:
        """Forget `bundle` as held and ready (lost, released) and wake whoever waits on it."""
        self._owned.discard(bundle)
        self._ready.discard(bundle)
        self._opened_early.pop(bundle, None)
        self._wake_ready_waiters()

    def _wake_ready_waiters(self) -> None:
        old, self._ready_changed = self._ready_changed, trio.Event()
        old.set()

    def owned_bundles(self) -> set[int]:
        return set(self._ready - self._releasing)

    def units_in_bundle(self, bundle: int) -> list[tuple[str, int]]:
        """The coordinator partitions placed in `bundle`."""
        units = [(GROUP_TOPIC, p) for p in range(self.layout.group_partitions)]
        units += [(TXN_TOPIC, p) for p in range(self.layout.txn_partitions)]
        return [u for u in units if self.bundle_of(*u) == bundle]

    # --- running ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, keep the lease, and reconcile ownership until cancelled."""
        await self._register()
        await self._renew_lease()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keep_lease)
            nursery.start_soon(self._follow_session)
            for path in (LIVE_BROKERS_PATH, DRAINING_BROKERS_PATH, BUNDLES_PATH):
                nursery.start_soon(self._watch, path)
            nursery.start_soon(self._tick)
            if self._expel_refusing:
                nursery.start_soon(PeerProbe(self._store, self._probed_peers,
                                             self._may_expel, self._expelled).run)
            await self._reconcile()
            task_status.started()
            await self._reconcile_loop()

    async def stop(self) -> None:
        """Graceful: say this broker is leaving (so the others take each bundle the moment it
        is released), release every bundle at once (hooks close ledgers), then deregister."""
        self._stopping = True
        self._draining = self._draining | {self.me.node_id}  # point clients at the others
        try:
            await register_broker(self._store, self.me, replace=True,
                                  extra={**self.registration_extra, "leaving": True})
        except MetadataError:
            log_failure(log, "could not announce that broker %d is leaving", self.me.node_id)
        while self._owned:  # (a round already under way may still finish an acquisition)
            async with trio.open_nursery() as releasing:  # all at once: one short pause
                for bundle in sorted(self._owned - self._releasing):
                    releasing.start_soon(self._release, bundle)
            await trio.sleep(0.01)  # (a release a round started finishes in its own task)
        try:
            await deregister_broker(self._store, self.me.node_id)
        except MetadataError:
            log_failure(log, "could not deregister broker %d", self.me.node_id)

    def poke(self) -> None:
        self._dirty.set()

    async def _tick(self) -> None:
        while True:
            await trio.sleep(RECONCILE_INTERVAL_S)
            self._dirty.set()

    async def _watch(self, path: str) -> None:
        while True:
            try:
                async with self._store.watch(path, children=True) as watcher:
                    self._dirty.set()
                    async for _event in watcher:
                        self._dirty.set()
                return
            except SessionExpiredError:
                await trio.sleep(0.2)
            except MetadataError:
                log_failure(log, "watch on %s failed; retrying", path)
                await trio.sleep(1.0)

    async def _renew_lease(self) -> None:
        epoch = self._session_epoch
        sent = self._clock()
        stat = await self._store.exists(f"{LIVE_BROKERS_PATH}/{self.me.node_id}")
        if stat is not None and stat.ephemeral and epoch == self._session_epoch:
            self._lease_until = max(self._lease_until,
                                    sent + LEASE_FRACTION * self._session_timeout_s)

    async def _keep_lease(self) -> None:
        interval = self._session_timeout_s / 6
        while True:
            try:
                with trio.move_on_after(self._session_timeout_s):
                    await self._renew_lease()
            except MetadataError as exc:
                log.debug("lease renewal failed: %r", exc)
            if not self.lease_valid() and self._owned and not self._stopping:
                log.warning("ownership lease lapsed; refusing to acknowledge writes",
                            extra={"bundles": sorted(self._owned)})
            await trio.sleep(interval)

    async def _follow_session(self) -> None:
        events = self._store.session_events()
        async with events:
            async for state in events:
                if state is SessionState.LOST:
                    await self._session_lost()

    def _probed_peers(self) -> dict[int, BrokerEndpoint]:
        """The brokers whose ports `PeerProbe` watches: registered, not leaving, not this one."""
        return {i: e for i, e in self._live.items()
                if i != self.me.node_id and i not in self._leaving}

    def _may_expel(self) -> bool:
        return self._reconciled and not self._stopping and self.lease_valid()

    def _expelled(self, node_id: int) -> None:
        self._dirty.set()  # take its bundles now (the watches say so too)

    async def _session_lost(self) -> None:
        """Every ephemeral node is gone: drop all bundles now, then register again."""
        async with self._stepping_down:
            await self._step_down("ZooKeeper session lost: stepping down")

    async def _expelled_while_alive(self) -> None:
        """This broker's live node is gone while its session lives: another broker found its
        Kafka port refusing connections and expelled it (peer_liveness.py), deleting its
        bundle nodes too; the new owners fence its ledgers.  Step down as after a lost
        session, then register again."""
        async with self._stepping_down:
            if await registration_ctime(self._store, self.me.node_id) is not None:
                return  # registered again meanwhile (a lost session's step-down)
            await self._step_down("this broker's registration was removed by another broker "
                                  "(its port refused connections): stepping down")

    async def _step_down(self, why: str) -> None:
        self._session_epoch += 1
        self._lease_until = -1.0
        lost = sorted(self._owned)
        self._ready.clear()
        self._owned.clear()
        self._opened_early.clear()
        self._wake_ready_waiters()
        log.warning(why, extra={"bundles": lost})
        for bundle in lost:
            await self._run_hook(self._on_releasing, bundle)
        if self._stopping:
            return
        while True:
            try:
                await self._register()
                await self._renew_lease()
                break
            except Exception:  # registration keeps being retried; the broker must not die
                log_failure(log, "registering again failed; retrying")
                await trio.sleep(0.5)
        self._dirty.set()

    async def _register(self) -> None:
        """Create this broker's live node, unless the one it created last still exists (a
        node is told apart by its creation time): a lost session's step-down that follows an
        expulsion's must not wait for the node the first one made in the new session."""
        current = await registration_ctime(self._store, self.me.node_id)
        if current is None or current != self._registered_ctime:
            await register_broker(self._store, self.me, extra=self.registration_extra)
            self._registered_ctime = await registration_ctime(self._store, self.me.node_id)

    async def _reconcile_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            if self._stopping:
                return
            try:
                await self._reconcile()
            except Exception as exc:  # retried; ownership must keep being reconciled
                log.warning("ownership reconcile failed: %r", exc)
                await trio.sleep(0.5)
                self._dirty.set()

    async def _reconcile(self) -> None:
        registrations = await read_live_registrations(self._store)
        for observe in self.registration_observers:
            observe(registrations)
        live = {i: endpoint_from_doc(doc) for i, doc in registrations.items()}
        left_at = self._clock()
        self._departed.update({i: (endpoint, left_at) for i, endpoint in self._live.items()
                               if i not in live})
        self._departed = {i: d for i, d in self._departed.items()
                          if i not in live and left_at - d[1] < DEPARTED_LISTING_S}
        self._live = live
        leaving = {i for i, doc in registrations.items() if doc.get("leaving")}
        self._leaving = leaving
        if self.me.node_id not in registrations and not self._stopping:
            if not self._stepping_down.locked():
                await self._expelled_while_alive()
            return
        self._draining = await read_draining(self._store) | leaving
        self._owners = await read_bundle_owners(self._store)
        now = self._clock()
        self._live_since = {i: self._live_since.get(i, now) for i in self._live}
        eligible = eligible_brokers(set(self._live), self._draining)
        me = self.me.node_id
        awaited = self._still_awaited(now)
        handed_back = False
        taken: list[int] = []  # loaded together below: a failover's pause is one load, not n
        to_claim: list[int] = []  # claimed together below: one ZooKeeper round trip, not n
        for bundle in range(self.layout.bundles):
            target = target_broker(bundle, eligible)
            owner = self._owners.get(bundle)
            if bundle in self._owned:
                if owner != me:  # our node vanished (session trouble): not ours any more
                    self._drop_bundle(bundle)
                    await self._run_hook(self._on_releasing, bundle)
                elif target is not None and target != me and target in self._live:
                    if me in self._draining or self._handback_delay_s <= 0:
                        await self._release(bundle)
                    elif (not handed_back
                          and now - self._live_since[target] >= self._handback_delay_s):
                        handed_back = True  # one per round: each hand-off is a short pause
                        await self._release(bundle)
                        self._dirty.set()
            elif owner is None and target == me and self.lease_valid():
                if not (awaited and target_broker(bundle, eligible + awaited) in awaited):
                    to_claim.append(bundle)  # (else: left to the awaited broker that wins it)
            elif owner == me and self.lease_valid():
                # created by a call whose answer we lost: this session holds it
                self._owned.add(bundle)
                taken.append(bundle)
        async def claim(bundle: int) -> None:
            if await self._claim(bundle):
                taken.append(bundle)

        async with trio.open_nursery() as claiming:
            for bundle in to_claim:
                claiming.start_soon(claim, bundle)
        async with trio.open_nursery() as loading:
            for bundle in taken:
                loading.start_soon(self._finish_acquire, bundle)
        self._reconciled = True
        old, self.changed = self.changed, trio.Event()
        old.set()

    def _still_awaited(self, now: float) -> list[int]:
        """The awaited brokers not yet seen live, while this broker still waits for them."""
        if self._await_until is None:
            self._await_until = now + self._await_s
        self._awaited -= set(self._live)
        return sorted(self._awaited) if now < self._await_until else []

    async def _claim(self, bundle: int) -> bool:
        """Create the bundle's owner node; True if this broker now holds it (its hooks still
        to run, `_finish_acquire`)."""
        if self._stopping:
            return False  # a round that started before stop() must not take bundles back
        data = json.dumps({"node_id": self.me.node_id}).encode()
        try:
            await self._store.create(f"{BUNDLES_PATH}/{bundle}", data, ephemeral=True)
        except NodeExistsError:
            return False
        self._owned.add(bundle)
        self._owners[bundle] = self.me.node_id
        return True

    async def _finish_acquire(self, bundle: int) -> None:
        if bundle in self._ready:
            return
        log.info("acquired bundle %d", bundle)
        await self._run_hook(self._on_acquired, bundle)
        if bundle in self._owned:
            self._ready.add(bundle)
        self._opened_early.pop(bundle, None)  # the whole bundle is served now
        self._wake_ready_waiters()

    async def _release(self, bundle: int) -> None:
        self._releasing.add(bundle)
        try:
            await self._run_hook(self._on_releasing, bundle)
            path = f"{BUNDLES_PATH}/{bundle}"
            try:
                # Only our own node: if our session expired meanwhile, another broker may own it.
                data, stat = await self._store.get(path)
                if json.loads(data).get("node_id") == self.me.node_id:
                    await self._store.delete(path, version=stat.version)
                else:
                    log.warning("bundle %d is owned by another broker now; not deleting", bundle)
            except (NoNodeError, BadVersionError):
                pass
            log.info("released bundle %d", bundle)
        finally:
            self._releasing.discard(bundle)
            self._owners.pop(bundle, None)
            self._drop_bundle(bundle)

    async def _run_hook(self, hook: BundleHook | None, bundle: int) -> None:
        if hook is None:
            return
        try:
            await hook(bundle)
        except Exception:
            log_failure(log, "bundle %d hook failed", bundle, bug_level=logging.ERROR)
