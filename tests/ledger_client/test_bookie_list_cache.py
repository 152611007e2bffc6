"""New ledgers' ensembles come from a bookie list kept a moment (BOOKIE_LIST_TTL_S)
(BookKeeper._bookies_for_new_ledger), but never from one with too few bookies for the ensemble:
a bookie that registers (returns after a crash, or joins) is used at once, not after the cached
list expires (with no spare bookie, every new ledger failed with NotEnoughBookiesError until
then, and a broker-kill's or bookie-kill's resume waited for it)."""

from __future__ import annotations

import pytest

from ledger_backend.client import bookkeeper
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.metadata import open_store
from tests.ledger_client.bookie_cluster import running_bookies


async def test_a_bookie_that_registers_is_used_for_the_next_ensemble_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the list is kept longer than this test can take on a loaded machine
    monkeypatch.setattr(bookkeeper, "BOOKIE_LIST_TTL_S", 600.0)
    store = await open_store("memory:")
    try:
        async with running_bookies(store, 2) as cluster, BookKeeper(store, timeout_s=5) as bk:
            first = await bk.create_ledger(2, 2, 2)  # reads (and keeps) the list of two
            third = await cluster.start_bookie()
            wide = await bk.create_ledger(3, 3, 2)  # the list kept has too few: read again
            assert third.address in wide.metadata.ensembles[0][1]
            await wide.close()
            await first.close()
    finally:
        await store.close()
