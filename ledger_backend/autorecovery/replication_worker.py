"""Replication workers: take an under-replicated ledger, lock it, re-replicate it, clear it.

Any number of workers run (in bookie processes, or `ledgerwire autorecovery`).  A worker
locks a ledger with an ephemeral node (a dead worker's locks go with its session), copies its
lost fragments (fragment_copy.py) and removes the mark only if nobody extended it meanwhile
(CAS on the mark's version).  An OPEN ledger is fenced and closed by recovery only once its
mark is older than `open_ledger_grace_s` (BookKeeper's openLedgerRereplicationGracePeriod,
30 s by default): a live writer replaces a lost bookie itself on its next add, so the grace
period usually ends with nothing left to do.

This module must never clear a mark while a fragment still names a lost bookie.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import trio

from ledger_backend.autorecovery.fragment_copy import ReplicationOutcome, replicate_ledger
from ledger_backend.autorecovery.under_replication import (
    UNDERREPLICATED_PATH,
    clear_mark,
    ensure_layout,
    is_disabled,
    list_underreplicated,
    read_mark,
    try_lock,
    unlock,
)
from ledger_backend.client.errors import LedgerError, NoSuchLedgerError
from ledger_backend.faults import warn_fault
from ledger_backend.metadata.store import BadVersionError, MetadataError, MetadataStore

log = logging.getLogger("ledgerwire.autorecovery.worker")


@dataclass
class WorkerConfig:
    open_ledger_grace_s: float = 30.0
    poll_interval_s: float = 5.0


class ReplicationWorker:
    def __init__(self, store: MetadataStore, bk: object, config: WorkerConfig | None = None):
        self._store = store
        self._bk = bk  # ledger_backend.client.bookkeeper.BookKeeper
        self.config = config or WorkerConfig()
        self.replicated: list[ReplicationOutcome] = []

    async def run(self) -> None:
        await ensure_layout(self._store)
        while True:
            try:
                async with self._store.watch(UNDERREPLICATED_PATH, children=True) as marks:
                    while True:
                        if not await is_disabled(self._store):
                            await self.work_once()
                        with trio.move_on_after(self.config.poll_interval_s):
                            await marks.__anext__()
            except MetadataError as exc:
                log.warning("replication worker: %r", exc)
                await trio.sleep(1.0)

    async def work_once(self) -> int:
        """Try every marked ledger once; returns how many were fully re-replicated."""
        done = 0
        for ledger_id in await list_underreplicated(self._store):
            if not await try_lock(self._store, ledger_id):
                continue
            try:
                if await self._replicate(ledger_id):
                    done += 1
            finally:
                with trio.CancelScope(shield=True):
                    await unlock(self._store, ledger_id)
        return done

    async def _replicate(self, ledger_id: int) -> bool:
        mark = await read_mark(self._store, ledger_id)
        if mark is None:
            return False
        doc, version = mark
        lost = set(doc.get("lost", []))
        age_s = time.time() - doc.get("since_ms", 0) / 1000
        try:
            outcome = await replicate_ledger(self._bk, ledger_id, lost,  # type: ignore[arg-type]
                                             fence_open=age_s >= self.config.open_ledger_grace_s)
        except NoSuchLedgerError:
            await self._clear(ledger_id, version)
            return True
        except LedgerError as exc:
            # e.g. NotEnoughBookiesError for every marked ledger while no spare bookie is up:
            # one line per kind of failure every 30 s, not one per ledger and retry
            warn_fault(log, type(exc).__name__, "ledger %d: re-replication failed (will retry): "
                       "%r", ledger_id, exc, interval_s=30.0)  # fmt: skip
            return False
        self.replicated.append(outcome)
        if outcome.complete:
            await self._clear(ledger_id, version)
            log.info("ledger %d re-replicated: %d entries copied, %d fragments", ledger_id,
                     outcome.entries_copied, outcome.fragments_replaced)
            return True
        return False

    async def _clear(self, ledger_id: int, version: int) -> None:
        try:
            await clear_mark(self._store, ledger_id, version)
        except BadVersionError:
            log.info("ledger %d: mark extended meanwhile; keeping it", ledger_id)


async def run_autorecovery(store: MetadataStore, bk: object, auditor_config: object = None,
                           worker_config: WorkerConfig | None = None) -> None:
    """Run an auditor candidate and a replication worker until cancelled."""
    from ledger_backend.autorecovery.auditor import Auditor, AuditorConfig

    assert auditor_config is None or isinstance(auditor_config, AuditorConfig)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(Auditor(store, bk, auditor_config).run)
        nursery.start_soon(ReplicationWorker(store, bk, worker_config).run)
