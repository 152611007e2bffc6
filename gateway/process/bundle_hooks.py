"""What taking and giving up a bundle does to a cluster broker's partitions (BundleHooks, the
ownership service's acquire and release hooks; gateway/process/cluster_broker.py wires them).

Acquiring: close any log of the bundle left open from an earlier ownership (stale), open the
partitions clients wait for first (requests, topics asked about lately), then load the bundle's
coordinator partitions and extensions, then open its other partitions in the background, a few
at a time.  A partition opened within the acquisition is reported to the ownership service, so
Kafka produce and fetch are served on it before the whole bundle is loaded.  Releasing: drop
the extensions' state, stop the coordinator partitions, close the bundle's logs side by side.

This module must never serve a request, and never report a partition opened before the
acquisition's stale logs were closed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import trio

from gateway.cluster.bundle_placement import GROUP_TOPIC, bundle_of
from gateway.cluster.ownership import OwnershipService
from gateway.coordinator.group_partitions import ClusterGroupCoordinator
from gateway.topics.topic_service import TopicService
from ledger_backend.faults import log_failure

log = logging.getLogger("ledgerwire.broker")

# partitions of acquired bundles opened in the background at once (see BundleHooks.acquired)
BACKGROUND_OPENS = 8
# the longest a take-over's background opens wait for the opens clients wait for
URGENT_FIRST_MAX_S = 3.0
# a coordinator partition or extension that failed to load is loaded again after this long,
# doubling up to the max, while the bundle stays here (BundleHooks._load_or_retry)
LOAD_RETRY_S = 1.0
LOAD_RETRY_MAX_S = 15.0


class BundleExtension(Protocol):
    """Per-bundle state another subsystem keeps (transaction coordinator partitions,
    RocketMQ offsets): loaded after the bundle's own units on acquisition, dropped before
    its logs close on release.  Both must be idempotent and must not raise for one bad unit."""

    async def acquired(self, bundle: int) -> None: ...
    async def releasing(self, bundle: int) -> None: ...


class BundleHooks:
    """What acquiring and releasing a bundle does to this broker's partitions."""

    def __init__(self, topics: TopicService, nursery: trio.Nursery) -> None:
        self.topics = topics
        self.nursery = nursery
        # background opens of acquired partitions, a few at a time: a request opens its
        # partition at once instead of queueing behind every other open of a failover
        self._opening = trio.CapacityLimiter(BACKGROUND_OPENS)
        self._opening_asked = trio.CapacityLimiter(BACKGROUND_OPENS)  # topics in demand
        self.groups: ClusterGroupCoordinator | None = None
        self.ownership: OwnershipService | None = None
        self.extensions: list[BundleExtension] = []
        # bundle -> the acquisition whose stale logs are closed: a partition opened after
        # that (and before the bundle is released) is fresh, fenced and recovered here
        self._acquisitions: dict[int, int] = {}
        self._acquisition = 0
        # opens clients wait for (requests, topics asked about lately) under way; a
        # take-over's background opens wait for them (`_after_urgent`)
        self._urgent = 0
        self._calm = trio.Event()
        self._calm.set()

    def add_extension(self, extension: BundleExtension) -> None:
        self.extensions.append(extension)

    async def acquired(self, bundle: int) -> None:
        assert self.ownership is not None and self.groups is not None
        # A log of this bundle still open here is stale by definition (opened while another
        # broker owned the bundle, e.g. by a request racing a release): its producer state
        # and offsets may be behind the log.  Close it; the next use reopens, fences, recovers.
        await self._close_bundle_logs(bundle)
        self._acquisition += 1
        self._acquisitions[bundle] = self._acquisition
        # Loaded side by side (each its own ledgers): the bundle is ready after the slowest
        # load, not after their sum (a failover's pause).  Meanwhile only the partitions in
        # demand are opened: those requests wait for (open_now) and those of topics clients
        # asked about lately (OwnershipService.recently_asked: a producer whose broker died
        # asks every second), BACKGROUND_OPENS at a time; every request waits for this load.
        bundles = self.ownership.layout.bundles
        asked = self.ownership.recently_asked()
        later: list[tuple[str, int]] = []
        for name, info in self.topics.topics().items():
            for p in range(info.partitions):
                if bundle_of(name, p, bundles) == bundle:
                    if name in asked:
                        self._open_urgently(bundle, name, p, self._opening_asked)
                    else:
                        later.append((name, p))
        async with trio.open_nursery() as loading:
            for topic, partition in self.ownership.units_in_bundle(bundle):
                if topic == GROUP_TOPIC:
                    loading.start_soon(self._load_group_partition, bundle, partition)
            for extension in self.extensions:
                loading.start_soon(self._load_extension, extension, bundle)
        # Then open (and so fence and recover) the bundle's other partitions in the background
        # rather than on their first request.  BACKGROUND_OPENS at a time: a failover of a few
        # hundred partitions opened all at once made every client wait for the slowest of them
        # (chaos.py: 19-26 s for ~190 partitions at load 30-40); started beside the loads
        # they slowed the bundle's readiness as the partition count grew (chaos.py broker
        # kills at load 10: 0.6-1.2 s from acquiring to serving, more with every trial).
        # They also wait for the opens clients wait for (at most URGENT_FIRST_MAX_S): on a
        # loaded machine a take-over's work shares little CPU, and the clients' partitions
        # opened beside other bundles' background opens took 0.5-1.8 s after the take-over
        # instead of ~0.2 s (chaos.py at load 10).  The loads are not held back: RocketMQ
        # queues and coordinators are served only once the whole bundle is loaded (holding
        # the loads back cost RocketMQ sends up to 12 s at load 20).
        for name, p in later:
            self.nursery.start_soon(self._after_urgent, self._open_quietly, bundle, name, p,
                                    self._opening)

    def _open_urgently(self, bundle: int, topic: str, partition: int,
                       limiter: trio.CapacityLimiter | None) -> None:
        """Open a partition clients wait for; background opens wait (`_after_urgent`).
        Counted when scheduled, so work scheduled after it sees it."""
        self._urgent += 1
        if self._calm.is_set():
            self._calm = trio.Event()

        async def open_it() -> None:
            try:
                await self._open_quietly(bundle, topic, partition, limiter)
            finally:
                self._urgent -= 1
                if self._urgent == 0:
                    self._calm.set()
        self.nursery.start_soon(open_it)

    async def _after_urgent(self, work: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run `work(*args)` once no urgent open is under way (or URGENT_FIRST_MAX_S passed)."""
        with trio.move_on_after(URGENT_FIRST_MAX_S):
            await self._calm.wait()
        await work(*args)

    async def _load_group_partition(self, bundle: int, partition: int) -> None:
        assert self.groups is not None
        await self._load_or_retry(bundle, partial(self.groups.start_partition, partition),
                                  f"coordinator partition {partition}")

    async def _load_extension(self, extension: BundleExtension, bundle: int) -> None:
        await self._load_or_retry(bundle, partial(extension.acquired, bundle), repr(extension))

    async def _load_or_retry(self, bundle: int, load: Callable[[], Awaitable[None]],
                             what: str) -> None:
        """Load a coordinator partition or an extension of the bundle; if that fails, load it
        again in the background (every LOAD_RETRY_S, doubling up to LOAD_RETRY_MAX_S) for as
        long as this acquisition of the bundle lasts.  A load fails when its ledger's bookie
        is away: in a `--workers N` node that bookie lives in another worker, which may still
        be starting (or restarting) when this one takes the bundle.  Before, such a load was
        never tried again until the bundle moved: its groups were answered NOT_COORDINATOR and
        its RocketMQ queues "not served here" for good."""
        acquisition = self._acquisitions.get(bundle)
        if await _loaded(load, bundle, what):
            return
        self.nursery.start_soon(self._retry_load, bundle, acquisition, load, what)

    async def _retry_load(self, bundle: int, acquisition: int | None,
                          load: Callable[[], Awaitable[None]], what: str) -> None:
        delay = LOAD_RETRY_S
        while True:
            await trio.sleep(delay)
            if acquisition is None or self._acquisitions.get(bundle) != acquisition:
                return  # released (a later acquisition loads it itself)
            if await _loaded(load, bundle, what):
                log.info("bundle %d: %s loaded on a retry", bundle, what)
                return
            delay = min(delay * 2, LOAD_RETRY_MAX_S)

    def open_now(self, bundle: int, topic: str, partition: int) -> None:
        """A request waits for this partition while its bundle loads: open it at once, beside
        the background opens (OwnershipService.on_awaited)."""
        self._open_urgently(bundle, topic, partition, None)

    async def _open_quietly(self, bundle: int, topic: str, partition: int,
                            limiter: trio.CapacityLimiter | None) -> None:
        """Open a partition of a bundle this broker holds (its hooks may still be loading:
        requests wait for the bundle to be ready, the open need not), `limiter` at a time
        (None: at once)."""
        assert self.ownership is not None
        async with limiter if limiter is not None else contextlib.nullcontext():
            if not self.ownership.holds_bundle(bundle):
                return
            if limiter is not None and self.topics.open_limit_reached():
                return  # at storage.max_open_partitions: opened on first use instead
            acquisition = self._acquisitions.get(bundle)  # None: stale logs not closed yet
            try:
                plog = await self.topics.partition(topic, partition)
            except Exception as exc:  # a background open must never take the broker down
                log.warning("opening %s-%d failed: %r", topic, partition, exc)
                return
        if not self.ownership.holds_bundle(bundle):  # released while it opened
            await _close_quietly(plog, topic, partition)
        elif acquisition is not None and self._acquisitions.get(bundle) == acquisition:
            # opened (fenced, recovered) within this acquisition: Kafka produce and fetch
            # need not wait for the bundle's coordinators (OwnershipService.serves_partition)
            self.ownership.partition_opened(bundle, topic, partition)

    async def releasing(self, bundle: int) -> None:
        assert self.ownership is not None and self.groups is not None
        self._acquisitions.pop(bundle, None)
        for extension in reversed(self.extensions):
            try:
                await extension.releasing(bundle)
            except Exception:
                log_failure(log, "bundle %d: %r failed to release", bundle, extension,
                            bug_level=logging.ERROR)
        for topic, partition in self.ownership.units_in_bundle(bundle):
            if topic == GROUP_TOPIC:
                await self.groups.stop_partition(partition)
        await self._close_bundle_logs(bundle)

    async def _close_bundle_logs(self, bundle: int) -> None:
        """Close the bundle's open partition logs side by side: each close writes its producer
        snapshot and closes its ledger (metadata round trips), and the bundle's partitions
        answer nowhere until the last one is closed and the next owner takes it (a bundle of
        the chaos benchmark held ~20-60 partitions).  Logs the idle unloader is closing are
        waited for too (a second close returns when the first is done): the next owner's open
        must not meet their closes' metadata writes."""
        assert self.ownership is not None
        bundles = self.ownership.layout.bundles
        logs = {**self.topics.unloading_partitions(), **self.topics.open_partitions()}
        async with trio.open_nursery() as closing:
            for (name, p), plog in logs.items():
                if bundle_of(name, p, bundles) == bundle:
                    closing.start_soon(_close_quietly, plog, name, p)


async def _loaded(load: Callable[[], Awaitable[None]], bundle: int, what: str) -> bool:
    try:
        await load()
    except Exception:
        log_failure(log, "bundle %d: %s failed to load", bundle, what, bug_level=logging.ERROR)
        return False
    return True


async def _close_quietly(plog: Any, topic: str, partition: int) -> None:
    try:
        await plog.close()
    except Exception as exc:  # fenced already: the new owner has it
        log.info("closing %s-%d: %r", topic, partition, exc)
