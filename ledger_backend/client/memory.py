"""MemoryBookKeeper: the ledger client's API (BookKeeper / WriteHandle / ReadHandle) in memory.

For unit tests of managed ledgers and everything above them. It keeps the semantics that matter
to callers: call-order entry ids with pipelined appends, in-order acknowledgement, LAC, closing,
fencing (open_ledger(recovery=True) fences the ledger: the old WriteHandle's next append raises
LedgerFencedError and the ledger is CLOSED at its last acknowledged entry), deletion, and long-poll
waits for the LAC. Several MemoryBookKeeper instances built on the same `MemoryLedgerCluster` (or
the same metadata store) see the same ledgers, which is how a test plays "two brokers".

Differences from the real client, on purpose: readers of an OPEN ledger see the writer's true LAC
(the real client sees the LAC piggybacked on later adds, one entry behind); nothing is durable.
This module must never be used by production code paths.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

import trio

from ledger_backend.client.errors import (
    LedgerClosedError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from ledger_backend.client.ledger_metadata import (
    LEDGER_ID_COUNTER_PATH,
    LedgerMetadata,
    LedgerState,
    PreparedLedger,
    validate_quorums,
)

if TYPE_CHECKING:
    from ledger_backend.metadata.store import MetadataStore


@dataclass
class _MemoryLedger:
    ledger_id: int
    metadata: LedgerMetadata
    entries: list[bytes] = field(default_factory=list)  # index = entry id; includes unacked
    last_add_confirmed: int = -1
    length: int = 0  # bytes of acknowledged entries
    fenced: bool = False
    lac_changed: trio.Event = field(default_factory=trio.Event)

    def publish_lac(self, lac: int) -> None:
        if lac > self.last_add_confirmed:
            self.length += sum(len(e) for e in self.entries[self.last_add_confirmed + 1 : lac + 1])
            self.last_add_confirmed = lac
        event, self.lac_changed = self.lac_changed, trio.Event()
        event.set()


class MemoryLedgerCluster:
    """The shared 'bookies + ledger metadata' that MemoryBookKeeper instances talk to."""

    def __init__(self) -> None:
        self.ledgers: dict[int, _MemoryLedger] = {}
        self._next_id = 1
        self.fail_appends_with: Exception | None = None  # tests: make every append raise this

    def allocate_id(self) -> int:
        ledger_id = self._next_id
        self._next_id += 1
        return ledger_id


_clusters_by_store: weakref.WeakKeyDictionary[object, MemoryLedgerCluster] = (
    weakref.WeakKeyDictionary()
)


def _cluster_for_store(store: object) -> MemoryLedgerCluster:
    try:
        return _clusters_by_store.setdefault(store, MemoryLedgerCluster())
    except TypeError:  # store not weak-referenceable: private cluster
        return MemoryLedgerCluster()


class MemoryBookKeeper:
    """In-memory BookKeeper. Use as `async with MemoryBookKeeper(store) as bk:` (or without
    `async with`: it owns no tasks). `store` is optional; when given, ledger ids come from
    store.next_id("/ledgerwire/ledger-id") and instances on the same store share ledgers."""

    def __init__(
        self,
        store: MetadataStore | None = None,
        *,
        timeout_s: float = 10.0,
        cluster: MemoryLedgerCluster | None = None,
    ) -> None:
        self._store = store
        self.timeout_s = timeout_s
        if cluster is None:
            cluster = _cluster_for_store(store) if store is not None else MemoryLedgerCluster()
        self.cluster = cluster
        self._closed = False

    async def __aenter__(self) -> MemoryBookKeeper:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def create_ledger(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        custom_metadata: dict[str, bytes] | None = None,
    ) -> MemoryWriteHandle:
        prepared = await self.prepare_ledger(ensemble_size, write_quorum, ack_quorum,
                                             custom_metadata)
        return self.adopt_ledger(prepared)

    async def prepare_ledger(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        custom_metadata: dict[str, bytes] | None = None,
        *,
        above: int = 0,
    ) -> PreparedLedger:
        """As BookKeeper.prepare_ledger; the twin keeps metadata in memory (no ops) and its
        ids only grow (above every listed one, whatever `above` says)."""
        self._check_open()
        validate_quorums(ensemble_size, write_quorum, ack_quorum)
        if self._store is not None:
            ledger_id = await self._store.next_id(LEDGER_ID_COUNTER_PATH)
        else:
            ledger_id = self.cluster.allocate_id()
            await trio.lowlevel.checkpoint()
        ensemble = tuple(f"memory-bookie-{i}" for i in range(ensemble_size))
        metadata = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            ensembles=((0, ensemble),),
            ctime_ms=int(time.time() * 1000),
            custom_metadata=dict(custom_metadata or {}),
        )
        return PreparedLedger(ledger_id, metadata, ())

    def adopt_ledger(self, prepared: PreparedLedger) -> MemoryWriteHandle:
        self._check_open()
        ledger = _MemoryLedger(prepared.ledger_id, prepared.metadata)
        self.cluster.ledgers[prepared.ledger_id] = ledger
        return MemoryWriteHandle(self.cluster, ledger)

    async def open_ledger(self, ledger_id: int, *, recovery: bool) -> MemoryReadHandle:
        self._check_open()
        await trio.lowlevel.checkpoint()
        ledger = self._ledger(ledger_id)
        if recovery and ledger.metadata.state is not LedgerState.CLOSED:
            ledger.fenced = True
            lac = ledger.last_add_confirmed
            del ledger.entries[lac + 1 :]  # unacknowledged adds are lost with the old writer
            ledger.metadata = ledger.metadata.replace(
                state=LedgerState.CLOSED, last_entry_id=lac, length=ledger.length
            )
            ledger.publish_lac(lac)
        elif recovery:
            ledger.fenced = True
        return MemoryReadHandle(self.cluster, ledger)

    async def delete_ledger(self, ledger_id: int) -> None:
        self._check_open()
        await trio.lowlevel.checkpoint()
        ledger = self._ledger(ledger_id)
        ledger.fenced = True
        del self.cluster.ledgers[ledger_id]
        ledger.publish_lac(ledger.last_add_confirmed)  # wake long polls so they notice

    async def list_ledgers(self) -> list[int]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        return sorted(self.cluster.ledgers)

    async def close(self) -> None:
        self._closed = True
        await trio.lowlevel.checkpoint()

    def _ledger(self, ledger_id: int) -> _MemoryLedger:
        try:
            return self.cluster.ledgers[ledger_id]
        except KeyError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosedError("this BookKeeper client is closed")


class MemoryWriteHandle:
    """Writer of one in-memory ledger. Appends complete in entry-id order."""

    def __init__(self, cluster: MemoryLedgerCluster, ledger: _MemoryLedger) -> None:
        self._cluster = cluster
        self._ledger = ledger
        self.ledger_id = ledger.ledger_id
        self._closed = False
        self._next_entry_id = 0

    @property
    def last_add_confirmed(self) -> int:
        return self._ledger.last_add_confirmed

    @property
    def length(self) -> int:
        return self._ledger.length

    @property
    def metadata(self) -> LedgerMetadata:
        return self._ledger.metadata

    @property
    def is_closed(self) -> bool:
        return self._closed

    async def append(self, data: bytes) -> int:
        self._check_writable()
        if self._cluster.fail_appends_with is not None:
            await trio.lowlevel.checkpoint()
            raise self._cluster.fail_appends_with
        # Take the id synchronously (before any checkpoint) so concurrent callers are pipelined.
        entry_id = self._next_entry_id
        self._next_entry_id += 1
        self._ledger.entries.append(bytes(data))
        await trio.lowlevel.checkpoint()
        # Acknowledging entry e acknowledges every earlier entry too (they are all stored), so
        # completion is in order and a cancelled caller never blocks the ones after it.
        if self._ledger.last_add_confirmed >= entry_id:
            return entry_id
        self._check_writable()
        self._ledger.publish_lac(entry_id)
        return entry_id

    async def close(self) -> None:
        """CAS the ledger to CLOSED at the last acknowledged entry. Idempotent; raises
        LedgerFencedError if another client fenced the ledger first."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        await trio.lowlevel.checkpoint()
        if self._ledger.fenced:
            raise LedgerFencedError(f"ledger {self.ledger_id} was fenced by another client")
        lac = self._ledger.last_add_confirmed
        del self._ledger.entries[lac + 1 :]
        self._ledger.metadata = self._ledger.metadata.replace(
            state=LedgerState.CLOSED, last_entry_id=lac, length=self._ledger.length
        )
        self._ledger.publish_lac(lac)

    def _check_writable(self) -> None:
        if self._ledger.fenced:
            raise LedgerFencedError(f"ledger {self.ledger_id} is fenced")
        if self._closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} write handle is closed")


class MemoryReadHandle:
    """Reader of one in-memory ledger."""

    def __init__(self, cluster: MemoryLedgerCluster, ledger: _MemoryLedger) -> None:
        self._cluster = cluster
        self._ledger = ledger
        self.ledger_id = ledger.ledger_id
        self._closed = False

    @property
    def metadata(self) -> LedgerMetadata:
        return self._ledger.metadata

    @property
    def custom_metadata(self) -> Mapping[str, bytes]:
        return self._ledger.metadata.custom_metadata

    @property
    def is_closed(self) -> bool:
        return self._ledger.metadata.state is LedgerState.CLOSED

    @property
    def last_add_confirmed(self) -> int:
        if self.is_closed:
            return self._ledger.metadata.last_entry_id
        return self._ledger.last_add_confirmed

    @property
    def length(self) -> int:
        return self._ledger.length

    async def read(self, first: int, last: int) -> list[bytes]:
        """Entries first..last inclusive; NoSuchEntryError beyond the LAC."""
        await trio.lowlevel.checkpoint()
        self._check_not_deleted()
        if first < 0 or last < first:
            raise ValueError(f"bad entry range {first}..{last}")
        if last > self.last_add_confirmed:
            raise NoSuchEntryError(
                f"ledger {self.ledger_id}: entry {last} is beyond the LAC {self.last_add_confirmed}"
            )
        return self._ledger.entries[first : last + 1]

    async def read_lac(self) -> int:
        await trio.lowlevel.checkpoint()
        self._check_not_deleted()
        return self.last_add_confirmed

    async def wait_for_lac(self, previous: int, timeout_s: float) -> int:
        """Return once the LAC exceeds `previous`, the ledger closes, or `timeout_s` passes;
        returns the LAC then (possibly still `previous`)."""
        with trio.move_on_after(timeout_s if math.isfinite(timeout_s) else math.inf):
            while self.last_add_confirmed <= previous and not self.is_closed:
                self._check_not_deleted()
                await self._ledger.lac_changed.wait()
        await trio.lowlevel.checkpoint()
        return self.last_add_confirmed

    async def close(self) -> None:
        self._closed = True
        await trio.lowlevel.checkpoint()

    def _check_not_deleted(self) -> None:
        if self._cluster.ledgers.get(self.ledger_id) is not self._ledger:
            raise NoSuchLedgerError(f"ledger {self.ledger_id} was deleted")
