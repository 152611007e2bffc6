"""Whether the cluster has a spare bookie: live bookies against the ensemble size brokers use.

With no more live bookies than the ensemble size (E), a failed bookie cannot be replaced: the
ledgers it belongs to stop taking writes until it returns (clients retry meanwhile; nothing
acknowledged is lost) and auto-recovery has nowhere to copy. That is legal but fragile, so a
broker says so: one WARNING at start-up and on every change into that state (one INFO when it
ends), `ledgerwire cluster status` and `GET /admin/v1/bookies/capacity` report it, and
`/metrics` has `ledgerwire_live_bookies` and `ledgerwire_spare_bookies`.

This module only counts and reports: it must never change placement or refuse writes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from ledger_backend.client.ledger_metadata import AVAILABLE_BOOKIES_PATH
from ledger_backend.metadata.store import MetadataError, MetadataStore, NoNodeError

log = logging.getLogger("ledgerwire.bookie_capacity")


@dataclass(frozen=True)
class BookieCapacity:
    live_bookies: int
    ensemble_size: int

    @property
    def spare_bookies(self) -> int:
        return self.live_bookies - self.ensemble_size

    @property
    def warning(self) -> str | None:
        if self.spare_bookies > 0:
            return None
        return (f"{self.live_bookies} live bookies for ensembles of {self.ensemble_size}: no "
                f"spare bookie, so a lost bookie pauses writes to its ledgers until it returns "
                f"and cannot be re-replicated; run at least {self.ensemble_size + 1} bookies")

    def to_json(self) -> dict[str, object]:
        return {"live_bookies": self.live_bookies, "ensemble_size": self.ensemble_size,
                "spare_bookies": self.spare_bookies, "warning": self.warning}


async def live_bookie_count(store: MetadataStore) -> int:
    try:
        return len(await store.children(AVAILABLE_BOOKIES_PATH))
    except NoNodeError:
        return 0


async def read_capacity(store: MetadataStore, ensemble_size: int) -> BookieCapacity:
    return BookieCapacity(await live_bookie_count(store), ensemble_size)


async def watch_capacity(store: MetadataStore, ensemble_size: int, *,
                         settle_s: float = 2.0, recheck_s: float = 30.0) -> None:
    """Log the state now and each time it changes between "spare" and "no spare" (a change is
    reported once it held for `settle_s`, so a bookie restart is not two lines)."""
    reported: bool | None = None  # True: a warning is out
    while True:
        try:
            async with store.watch(AVAILABLE_BOOKIES_PATH, children=True) as changes:
                while True:
                    capacity = await read_capacity(store, ensemble_size)
                    short = capacity.warning is not None
                    if short != reported:
                        await trio.sleep(settle_s if reported is not None else 0.0)
                        capacity = await read_capacity(store, ensemble_size)
                        short = capacity.warning is not None
                        if short != reported:
                            if short:
                                log.warning("%s", capacity.warning)
                            elif reported:
                                log.info("%d live bookies for ensembles of %d: a spare again",
                                         capacity.live_bookies, ensemble_size)
                            reported = short
                    with trio.move_on_after(recheck_s):
                        await changes.__anext__()
        except StopAsyncIteration:
            return
        except MetadataError as exc:
            log.debug("bookie capacity watch ended: %r", exc)
            await trio.sleep(1.0)
