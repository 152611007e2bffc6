"""Randomised faults (a bookie stops or stalls) while a writer streams adds and another client
recovers the ledger: recovery never ends before an acknowledged entry, and every acknowledged
entry reads back as written."""

from __future__ import annotations

import random

import pytest
import trio

from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.errors import LedgerError
from ledger_backend.metadata import open_store
from tests.ledger_client.bookie_cluster import running_bookies


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
async def test_recovery_under_random_faults_keeps_every_acked_entry(seed: int) -> None:
    rng = random.Random(seed)
    store = await open_store("memory:")
    acked: dict[int, bytes] = {}
    try:
        async with running_bookies(store, 5) as cluster, BookKeeper(store, timeout_s=0.5) as bk_a, \
                BookKeeper(store, timeout_s=0.5) as bk_b:  # fmt: skip
            writer = await bk_a.create_ledger(3, 2, 2)
            limiter = trio.Semaphore(8)

            async def add(seq: int) -> None:
                payload = b"seq-%d-" % seq + bytes(rng.randrange(1, 300))
                try:
                    acked[await writer.append(payload)] = payload
                except LedgerError:
                    pass
                finally:
                    limiter.release()

            async def inject_fault() -> None:
                victim = rng.choice(list(writer.metadata.current_ensemble))
                if rng.random() < 0.5:
                    await cluster.stop_bookie(victim)
                else:
                    storage = cluster.storage(victim)
                    assert isinstance(storage, MemoryBookieStorage)
                    storage.hold_adds()  # stalls: the writer times out and replaces it

            recover_after = rng.randrange(60, 250)
            fault_at = rng.randrange(5, recover_after - 40)
            async with trio.open_nursery() as nursery:
                for seq in range(300):
                    await limiter.acquire()
                    if seq == fault_at:
                        await inject_fault()
                    if seq == recover_after:
                        last_acked = max(acked, default=-1)
                        rh = await bk_b.open_ledger(writer.ledger_id, recovery=True)
                    nursery.start_soon(add, seq)
            assert writer.ensemble_changes >= 1
            assert rh.is_closed
            assert rh.last_add_confirmed >= last_acked
            # acks that came after recovery started must still lie inside the closed ledger
            assert all(entry_id <= rh.last_add_confirmed for entry_id in acked)
            if acked:
                entries = await rh.read(0, rh.last_add_confirmed)
                for entry_id, payload in acked.items():
                    assert entries[entry_id] == payload
            for storage in (b.storage for b in cluster.bookies.values()):
                assert isinstance(storage, MemoryBookieStorage)
                storage.release_adds()
    finally:
        await store.close()
