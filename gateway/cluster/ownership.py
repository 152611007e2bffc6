"""Partition ownership in a cluster: bundles of partitions, each owned by one live broker.

Scheme (after Pulsar's namespace bundles): where a partition lives and which broker should own
each bundle are pure functions (gateway/cluster/bundle_placement.py); what this broker knows of
ownership and what request handlers ask of it is `OwnershipView`
(gateway/cluster/ownership_view.py).  This module keeps that view current.
A bundle's owner holds the ephemeral node /ledgerwire/ownership/bundles/<b>.

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
"""

from __future__ import annotations

import json
import logging
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
from gateway.cluster.bundle_placement import eligible_brokers, target_broker
from gateway.cluster.ownership_view import DEPARTED_LISTING_S, OwnershipView
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

LEASE_FRACTION = 0.6
RECONCILE_INTERVAL_S = 2.0
HANDBACK_DELAY_S = 15.0  # a (re)joined broker must be live this long before bundles move to it

BundleHook = Callable[[int], Awaitable[None]]


class OwnershipService(OwnershipView):
    """This broker's share of bundle ownership: registers, keeps the lease, reconciles (see
    the module docstring); the answers are `OwnershipView`'s."""

    def __init__(self, store: MetadataStore, layout: ClusterLayout, me: BrokerEndpoint, *,
                 session_timeout_s: float, on_acquired: BundleHook | None = None,
                 on_releasing: BundleHook | None = None,
                 clock: Callable[[], float] = trio.current_time,
                 handback_delay_s: float = HANDBACK_DELAY_S,
                 expel_refusing: bool = False, awaited_brokers: Iterable[int] = (),
                 await_s: float = 0.0) -> None:
        super().__init__(layout, me, clock=clock)
        self._store = store
        self._session_timeout_s = session_timeout_s
        self._on_acquired = on_acquired
        self._on_releasing = on_releasing
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
        self._live_since: dict[int, float] = {}  # node id -> when this broker first saw it live
        self._session_epoch = 0
        self._dirty = trio.Event()
        self._stopping = False
        self.changed = trio.Event()  # set (and replaced) after every reconcile round
        # more fields of the live node (e.g. the RocketMQ listener), set before run()
        self.registration_extra: dict[str, object] = {}
        # told every live registration as each round reads them, before it loads a bundle
        # (a gone broker's ports are adopted at once: gateway/rocketmq/adoption.py)
        self.registration_observers: list[Callable[[dict[int, dict[str, Any]]], None]] = []

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
