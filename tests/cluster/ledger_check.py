"""Reading every ledger of a cluster straight from its bookies (no broker, no cache), to check
that re-replication left every entry readable and no fragment on a dead bookie."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import trio

from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.errors import LedgerError, NoSuchLedgerError
from ledger_backend.metadata import open_store


@dataclass
class LedgerReport:
    ledgers: int = 0
    entries: int = 0
    on_dead: list[int] = field(default_factory=list)  # ledgers naming a dead bookie
    unreadable: list[str] = field(default_factory=list)


async def _check(metadata_url: str, dead: set[str], read: bool,
                 secret_file: Path | None) -> LedgerReport:  # fmt: skip
    report = LedgerReport()
    secret = BookieSecret.load(file=secret_file) if secret_file else None
    store = await open_store(metadata_url)
    try:
        async with BookKeeper(store, timeout_s=5.0, bookie_secret=secret) as bk:
            for ledger_id in await bk.list_ledgers():
                try:
                    metadata, _ = await bk.context.read_metadata(ledger_id)
                except NoSuchLedgerError:
                    continue
                report.ledgers += 1
                if dead & {b for _, ens in metadata.ensembles for b in ens}:
                    report.on_dead.append(ledger_id)
                if not read:
                    continue
                try:
                    handle = await bk.open_ledger(ledger_id, recovery=False)
                    last = handle.last_add_confirmed
                    for first in range(0, last + 1, 200):
                        got = await handle.read(first, min(last, first + 199))
                        report.entries += len(got)
                except LedgerError as exc:
                    report.unreadable.append(f"{ledger_id}: {exc!r}")
    finally:
        await store.close()
    return report


def check_ledgers(metadata_url: str, dead: set[str], *, read: bool = True,
                  secret_file: Path | None = None) -> LedgerReport:  # fmt: skip
    return trio.run(_check, metadata_url, dead, read, secret_file)
