"""A new owner opening an existing managed ledger writes its next ledger and the list naming it
in ONE metadata transaction (factory.py, step 3), on real bookies: the id comes from a block
reserved on the shared counter, above every id the list holds, even when the block is older
than the listed ledgers (another client's)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.errors import LedgerError
from ledger_backend.client.ledger_metadata import LedgerMetadata, LedgerState, ledger_path
from ledger_backend.managed_ledger import ManagedLedgerFactory, ManagedLedgerFencedError
from ledger_backend.metadata import MetadataStore
from tests.managed_ledger.ml_test_support import FakeClock
from tests.managed_ledger.test_managed_ledger_first_open import CONFIG, CountingStore
from tests.managed_ledger.test_managed_ledger_on_bookies import bookies


@pytest.fixture
async def counted(store: MetadataStore) -> AsyncIterator[CountingStore]:
    async with bookies(store, 1):
        yield CountingStore(store)


@pytest.mark.timeout(60)
async def test_a_reopen_costs_one_metadata_write(counted: CountingStore,
                                                 clock: FakeClock) -> None:
    async with BookKeeper(counted, timeout_s=10) as bk:  # type: ignore[arg-type]
        factory = ManagedLedgerFactory(counted, bk, clock=clock)  # type: ignore[arg-type]
        closed = []
        for i in range(5):
            ml = await factory.open(f"t/reopened-{i}", CONFIG)
            await ml.append(b"before-%d" % i)
            await ml.close()
            closed.append(ml.current_ledger_id)
        counted.writes.clear()
        for i in range(5):  # a restart's reopen: nothing to recover
            ml = await factory.open(f"t/reopened-{i}", CONFIG)
            assert ml.current_ledger_id > closed[i]
            assert [r.ledger_id for r in ml.ledgers] == [closed[i], ml.current_ledger_id]
            await ml.append(b"after-%d" % i)
            assert [e.data for e in await ml.read(ml.first_position, 10)] == [  # type: ignore[arg-type]
                b"before-%d" % i, b"after-%d" % i]
        # the ledger's create and the list's CAS together (was: next_id, create, set)
        assert counted.writes == ["multi of 2"] * 5


@pytest.mark.timeout(60)
async def test_a_take_over_lists_its_ledger_above_every_listed_id(
        counted: CountingStore, clock: FakeClock) -> None:
    store: MetadataStore = counted  # type: ignore[assignment]
    async with BookKeeper(store, timeout_s=10) as bk_a, BookKeeper(store, timeout_s=10) as bk_b:
        factory_b = ManagedLedgerFactory(counted, bk_b, clock=clock)  # type: ignore[arg-type]
        await factory_b.open("t/warm-up-0", CONFIG)  # b reserves the first block of ids
        ml_a = await ManagedLedgerFactory(counted, bk_a, clock=clock).open(  # type: ignore[arg-type]
            "t/taken-0", CONFIG)  # a's block (and id) is above all of b's
        first = await ml_a.append(b"acknowledged")
        # a "dies" without closing; b takes over: its unused block ids are all below a's
        ml_b = await factory_b.open("t/taken-0", CONFIG)
        assert ml_b.current_ledger_id > ml_a.current_ledger_id
        recovered = LedgerMetadata.from_json_bytes(
            (await counted.get(ledger_path(ml_a.current_ledger_id)))[0])
        assert recovered.state is LedgerState.CLOSED and recovered.last_entry_id == 0
        with pytest.raises((LedgerError, ManagedLedgerFencedError)):  # fenced at the bookie
            await ml_a.append(b"from the deposed owner")
        await ml_b.append(b"second")
        await ml_b.close()
        # the list as stored is in log order (a reader would refuse it otherwise)
        again = await ManagedLedgerFactory(counted, bk_a, clock=clock).open(  # type: ignore[arg-type]
            "t/taken-0", CONFIG)
        assert [e.data for e in await again.read(first, 10)] == [b"acknowledged", b"second"]
