"""The auditor: elected through the metadata store, it notices lost bookies and marks every
ledger with a fragment on one as under-replicated.

Election: each candidate creates an ephemeral sequential node under .../election; the lowest
sequence number is the auditor, the others watch the children and take over when it goes.

Audit round (every `audit_interval_s`, and whenever the available-bookie list changes): a
bookie named in some ledger's ensemble but not registered as available is *missing*; once it
has been missing for `lost_bookie_delay_s` (so a restart or a short network blip does not cost
a re-replication) it is *lost*, and every ledger naming it gets (or extends) its
under-replication mark.  The auditor never copies anything itself.

This module must never mark a bookie lost before the delay has passed, and never remove a mark.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from ledger_backend.autorecovery.under_replication import (
    ELECTION_PATH,
    ensure_layout,
    is_disabled,
    mark_underreplicated,
)
from ledger_backend.client.errors import LedgerError, NoSuchLedgerError
from ledger_backend.client.ledger_metadata import AVAILABLE_BOOKIES_PATH
from ledger_backend.faults import warn_fault
from ledger_backend.metadata.store import (
    MetadataError,
    MetadataStore,
    NoNodeError,
    SessionExpiredError,
)

log = logging.getLogger("ledgerwire.autorecovery.auditor")


@dataclass
class AuditorConfig:
    lost_bookie_delay_s: float = 30.0  # BookKeeper's lostBookieRecoveryDelay is 0 by default
    audit_interval_s: float = 10.0


class Auditor:
    def __init__(self, store: MetadataStore, bk: object, config: AuditorConfig | None = None,
                 *, clock: Callable[[], float] = trio.current_time) -> None:
        self._store = store
        self._bk = bk  # ledger_backend.client.bookkeeper.BookKeeper
        self.config = config or AuditorConfig()
        self._clock = clock
        self._missing_since: dict[str, float] = {}
        self.is_leader = False
        self.marked: set[int] = set()

    async def run(self) -> None:
        """Stand for election forever; audit while elected."""
        await ensure_layout(self._store)
        while True:
            try:
                me = await self._store.create(f"{ELECTION_PATH}/candidate-", b"",
                                              ephemeral=True, sequential=True)
                await self._campaign(me.rsplit("/", 1)[1])
            except SessionExpiredError:
                self.is_leader = False
            except MetadataError as exc:
                self.is_leader = False
                log.warning("auditor election: %r", exc)
                await trio.sleep(1.0)

    async def _campaign(self, my_name: str) -> None:
        async with self._store.watch(ELECTION_PATH, children=True) as election:
            while True:
                candidates = sorted(await self._store.children(ELECTION_PATH))
                if my_name not in candidates:
                    return  # our node went with a lost session: stand again
                if candidates[0] == my_name:
                    break
                await election.__anext__()
        self.is_leader = True
        log.info("elected auditor (%s)", my_name)
        async with self._store.watch(AVAILABLE_BOOKIES_PATH, children=True) as bookies:
            while True:
                if not await is_disabled(self._store):
                    await self.audit_once()
                with trio.move_on_after(self.config.audit_interval_s):
                    await bookies.__anext__()

    async def audit_once(self) -> dict[int, set[str]]:
        """One audit round; returns ledger id -> lost bookies it names (newly or again)."""
        try:
            available = set(await self._store.children(AVAILABLE_BOOKIES_PATH))
        except NoNodeError:
            available = set()
        now = self._clock()
        ctx = self._bk.context  # type: ignore[attr-defined]
        ensembles_of: dict[int, set[str]] = {}
        for ledger_id in await ctx.list_ledger_ids():
            try:
                metadata, _ = await ctx.read_metadata(ledger_id)
            except NoSuchLedgerError:
                continue
            except LedgerError as exc:
                warn_fault(log, "read", "audit: cannot read ledger %d: %r", ledger_id, exc,
                           interval_s=30.0)  # fmt: skip
                continue
            ensembles_of[ledger_id] = {b for _, ens in metadata.ensembles for b in ens}
        referenced = set().union(*ensembles_of.values()) if ensembles_of else set()
        missing = referenced - available
        for bookie in list(self._missing_since):
            if bookie not in missing:
                del self._missing_since[bookie]
        for bookie in missing:
            self._missing_since.setdefault(bookie, now)
        delay = self.config.lost_bookie_delay_s
        lost = {b for b in missing if now - self._missing_since[b] >= delay}
        found: dict[int, set[str]] = {}
        for ledger_id, bookies in ensembles_of.items():
            on_lost = bookies & lost
            if on_lost:
                found[ledger_id] = on_lost
                if await mark_underreplicated(self._store, ledger_id, on_lost):
                    log.info("ledger %d under-replicated (lost %s)", ledger_id, sorted(on_lost))
                self.marked.add(ledger_id)
        if missing - lost:
            log.info("bookies missing, not yet lost: %s", sorted(missing - lost))
        return found
