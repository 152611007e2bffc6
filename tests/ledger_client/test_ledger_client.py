"""The real ledger client against in-process bookie servers over TCP (MemoryBookieStorage)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.protocol import BookieAddress
from ledger_backend.client.bookkeeper import BookKeeper, ReadHandle
from ledger_backend.client.entry_format import decode_entry, encode_entry
from ledger_backend.client.errors import (
    DigestMismatchError,
    InvalidQuorumError,
    LedgerClosedError,
    LedgerError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
)
from ledger_backend.client.ledger_metadata import LedgerMetadata, LedgerState, ledger_path
from ledger_backend.metadata import MetadataStore, open_store
from tests.ledger_client.bookie_cluster import running_bookies, silent_bookie


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    s = await open_store("memory:")
    try:
        yield s
    finally:
        await s.close()


async def _stored_entry_ids(storage: object, ledger_id: int) -> set[int]:
    assert isinstance(storage, MemoryBookieStorage)
    ledger = storage._ledgers.get(ledger_id)  # test-only peek at the twin's dict
    return set() if ledger is None else set(ledger.entries)


async def test_striping_places_each_entry_on_its_write_set(store: MetadataStore) -> None:
    async with running_bookies(store, 3) as cluster, BookKeeper(store, timeout_s=5) as bk:
        wh = await bk.create_ledger(3, 2, 2, custom_metadata={"k": b"v"})
        for i in range(9):
            assert await wh.append(b"entry-%d" % i) == i
        ensemble = wh.metadata.current_ensemble
        assert sorted(ensemble) == sorted(cluster.bookies)
        for index, bookie in enumerate(ensemble):
            expected = {e for e in range(9) if index in ((e) % 3, (e + 1) % 3)}
            assert await _stored_entry_ids(cluster.storage(bookie), wh.ledger_id) == expected
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        assert rh.is_closed and rh.last_add_confirmed == 8
        assert rh.metadata.length == sum(len(b"entry-%d" % i) for i in range(9))
        assert rh.metadata.custom_metadata == {"k": b"v"}
        assert await rh.read(0, 8) == [b"entry-%d" % i for i in range(9)]
        with pytest.raises(LedgerClosedError):
            await wh.append(b"more")


async def test_metadata_is_versioned_json_at_padded_path(store: MetadataStore) -> None:
    async with running_bookies(store, 1), BookKeeper(store, timeout_s=5) as bk:
        wh = await bk.create_ledger(1, 1, 1)
        data, stat = await store.get(ledger_path(wh.ledger_id))
        assert ledger_path(wh.ledger_id).endswith(f"/{wh.ledger_id:020d}")
        metadata = LedgerMetadata.from_json_bytes(data)
        assert metadata.state is LedgerState.OPEN and stat.version == 0
        await wh.append(b"a")
        await wh.close()
        data, stat = await store.get(ledger_path(wh.ledger_id))
        assert LedgerMetadata.from_json_bytes(data).state is LedgerState.CLOSED
        assert stat.version == 1
        assert await bk.list_ledgers() == [wh.ledger_id]
        await bk.delete_ledger(wh.ledger_id)
        assert await bk.list_ledgers() == []
        with pytest.raises(NoSuchLedgerError):
            await bk.open_ledger(wh.ledger_id, recovery=False)


async def test_quorum_validation_and_not_enough_bookies(store: MetadataStore) -> None:
    async with running_bookies(store, 2), BookKeeper(store, timeout_s=5) as bk:
        with pytest.raises(InvalidQuorumError):
            await bk.create_ledger(2, 3, 1)
        with pytest.raises(InvalidQuorumError):
            await bk.create_ledger(2, 1, 2)
        with pytest.raises(NotEnoughBookiesError):
            await bk.create_ledger(3, 2, 2)


async def test_ack_waits_for_quorum_and_completes_in_order(store: MetadataStore) -> None:
    async with running_bookies(store, 2) as cluster, BookKeeper(store, timeout_s=5) as bk:
        wh = await bk.create_ledger(2, 2, 2)
        held = cluster.storage(wh.metadata.current_ensemble[1])
        assert isinstance(held, MemoryBookieStorage)
        held.hold_adds()  # this bookie stores but does not acknowledge
        done: list[int] = []

        async def add(data: bytes) -> None:
            done.append(await wh.append(data))

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(add, b"%d" % i)
            await trio.sleep(0.3)
            assert done == [] and wh.last_add_confirmed == -1  # Qa=2 not reached
            assert held.max_adds_in_flight == 5  # pipelined: all sent without waiting
            held.release_adds()
        assert sorted(done) == [0, 1, 2, 3, 4] and wh.last_add_confirmed == 4


async def test_pipelined_appends_get_ids_in_call_order(store: MetadataStore) -> None:
    async with running_bookies(store, 3), BookKeeper(store, timeout_s=5) as bk:
        wh = await bk.create_ledger(3, 3, 2)
        ids: dict[bytes, int] = {}
        completion_order: list[int] = []

        async def add(data: bytes) -> None:
            entry_id = await wh.append(data)
            ids[data] = entry_id
            completion_order.append(entry_id)

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(add, b"payload-%d" % i)
        assert sorted(ids.values()) == list(range(200))
        # all 200 went out before any was acknowledged, so they carried LAC -1; the next add
        # carries 199: readers of an open ledger see the LAC piggybacked on adds
        assert await wh.append(b"tail") == 200
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        assert rh.last_add_confirmed == 199
        stored = await rh.read(0, 199)
        assert all(stored[entry_id] == data for data, entry_id in ids.items())
        with pytest.raises(NoSuchEntryError):
            await rh.read(0, 200)


async def test_digest_mismatch_is_detected(store: MetadataStore) -> None:
    async with running_bookies(store, 1) as cluster, BookKeeper(store, timeout_s=5) as bk:
        wh = await bk.create_ledger(1, 1, 1)
        await wh.append(b"good data")
        await wh.append(b"more")
        await wh.close()
        storage = cluster.storage(wh.metadata.current_ensemble[0])
        assert isinstance(storage, MemoryBookieStorage)
        stored = bytearray(storage._ledgers[wh.ledger_id].entries[0])
        stored[-1] ^= 0x01  # one flipped bit in the payload
        storage._ledgers[wh.ledger_id].entries[0] = bytes(stored)
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        with pytest.raises(DigestMismatchError):
            await rh.read(0, 0)
        with pytest.raises(DigestMismatchError):  # a plain error from a range read too
            await rh.read(0, 1)
        assert await rh.read(1, 1) == [b"more"]


def test_entry_format_checks_ids_and_crc() -> None:
    body = encode_entry(7, 3, 2, 100, b"xyz")
    entry = decode_entry(body, ledger_id=7, entry_id=3)
    assert (entry.lac, entry.ledger_length, entry.payload) == (2, 100, b"xyz")
    with pytest.raises(DigestMismatchError):
        decode_entry(body, ledger_id=7, entry_id=4)
    with pytest.raises(DigestMismatchError):
        decode_entry(body[:-1], ledger_id=7, entry_id=3)
    tampered = bytearray(body)
    tampered[20] ^= 0x80  # header byte (the lac) covered by the CRC
    with pytest.raises(DigestMismatchError):
        decode_entry(bytes(tampered), ledger_id=7, entry_id=3)


async def test_fencing_old_writer_and_recovery_keeps_acknowledged(store: MetadataStore) -> None:
    async with running_bookies(store, 3), BookKeeper(store, timeout_s=5) as bk_a, \
            BookKeeper(store, timeout_s=5) as bk_b:  # fmt: skip
        writer = await bk_a.create_ledger(3, 2, 2)
        acknowledged = [await writer.append(b"a-%d" % i) for i in range(10)]
        rh = await bk_b.open_ledger(writer.ledger_id, recovery=True)
        assert rh.is_closed
        assert rh.last_add_confirmed >= acknowledged[-1]
        assert await rh.read(0, 9) == [b"a-%d" % i for i in range(10)]
        assert rh.metadata.length == sum(len(b"a-%d" % i) for i in range(10))
        with pytest.raises(LedgerFencedError):
            await writer.append(b"after fencing")
        with pytest.raises(LedgerFencedError):
            await writer.close()
        again = await bk_b.open_ledger(writer.ledger_id, recovery=True)
        assert again.last_add_confirmed == rh.last_add_confirmed


async def test_recovery_of_empty_ledger_closes_at_minus_one(store: MetadataStore) -> None:
    async with running_bookies(store, 2), BookKeeper(store, timeout_s=5) as bk:
        writer = await bk.create_ledger(2, 2, 1)
        rh = await bk.open_ledger(writer.ledger_id, recovery=True)
        assert rh.is_closed and rh.last_add_confirmed == -1 and rh.metadata.length == 0


async def test_ensemble_change_when_a_bookie_dies(store: MetadataStore) -> None:
    async with running_bookies(store, 4) as cluster, BookKeeper(store, timeout_s=2) as bk:
        wh = await bk.create_ledger(3, 2, 2)
        for i in range(10):
            await wh.append(b"before-%d" % i)
        victim = wh.metadata.current_ensemble[0]
        await cluster.stop_bookie(victim)
        for i in range(10):
            await wh.append(b"after-%d" % i)
        assert wh.ensemble_changes >= 1
        assert victim not in wh.metadata.current_ensemble
        assert len(wh.metadata.ensembles) == 2
        # the first add that needed the dead bookie (index 0) is the first of the new fragment
        assert wh.metadata.ensembles[1][0] == min(e for e in range(10, 20) if e % 3 in (0, 2))
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        expected = [b"before-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(10)]
        assert await rh.read(0, 19) == expected


async def test_wait_for_lac_long_polls(store: MetadataStore) -> None:
    async with running_bookies(store, 1), BookKeeper(store, timeout_s=5,
                                                     explicit_lac_delay_s=0) as bk:
        wh = await bk.create_ledger(1, 1, 1)
        await wh.append(b"0")
        await wh.append(b"1")
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        assert rh.last_add_confirmed == 0
        assert await rh.wait_for_lac(0, 0.2) == 0  # nothing new: times out
        async with trio.open_nursery() as nursery:

            async def write_later() -> None:
                await trio.sleep(0.1)
                await wh.append(b"2")

            nursery.start_soon(write_later)
            assert await rh.wait_for_lac(0, 5) >= 1
        await wh.close()
        assert await rh.wait_for_lac(1, 5) == 2
        assert rh.is_closed


async def test_recovery_recovers_unacknowledged_entries_to_full_quorum(
    store: MetadataStore,
) -> None:
    async with running_bookies(store, 3) as cluster, BookKeeper(store, timeout_s=5) as bk_a, \
            BookKeeper(store, timeout_s=5) as bk_b:  # fmt: skip
        writer = await bk_a.create_ledger(3, 3, 2)
        for i in range(3):
            await writer.append(b"acked-%d" % i)
        ensemble = writer.metadata.current_ensemble
        slow: list[MemoryBookieStorage] = []
        for bookie in ensemble[1:]:
            storage = cluster.storage(bookie)
            assert isinstance(storage, MemoryBookieStorage)
            storage.hold_adds()
            slow.append(storage)  # entries reach these bookies but are never acknowledged
        outcomes: list[object] = []
        recovered: list[object] = []

        async def try_append(data: bytes) -> None:
            try:
                outcomes.append(await writer.append(data))
            except LedgerFencedError as exc:
                outcomes.append(exc)

        async def recover() -> None:
            recovered.append(await bk_b.open_ledger(writer.ledger_id, recovery=True))

        async with trio.open_nursery() as nursery:
            for i in range(3, 6):
                nursery.start_soon(try_append, b"unacked-%d" % i)
            await trio.sleep(0.2)
            assert writer.last_add_confirmed == 2
            nursery.start_soon(recover)
            await trio.sleep(0.3)  # recovery is fenced, has read 3..5, is re-writing them
            assert not recovered
            for s in slow:
                s.release_adds()
        (rh,) = recovered
        assert isinstance(rh, ReadHandle)
        # entries 3..5 exist on bookies: recovery may keep them (never fewer than acked ones)
        assert rh.last_add_confirmed == 5
        entries = await rh.read(0, 5)
        assert entries[:3] == [b"acked-%d" % i for i in range(3)]
        assert sorted(entries[3:]) == [b"unacked-%d" % i for i in range(3, 6)]  # any task order
        for bookie in ensemble:  # re-written to the full write quorum
            assert await _stored_entry_ids(cluster.storage(bookie), writer.ledger_id) == set(
                range(6)
            )
        with pytest.raises(LedgerFencedError):
            await writer.append(b"late")


async def test_recovery_refuses_to_guess_with_too_few_bookies(store: MetadataStore) -> None:
    async with running_bookies(store, 3) as cluster, BookKeeper(store, timeout_s=1) as bk:
        writer = await bk.create_ledger(3, 3, 1)
        await writer.append(b"x")
        await cluster.stop_bookie(writer.metadata.current_ensemble[2])
        from ledger_backend.client.errors import LedgerRecoveryError

        # Qw - Qa + 1 = 3 answers are needed from every write set: one bookie down is too many
        with pytest.raises(LedgerRecoveryError):
            await bk.open_ledger(writer.ledger_id, recovery=True)
        data, _ = await store.get(ledger_path(writer.ledger_id))
        assert LedgerMetadata.from_json_bytes(data).state is LedgerState.IN_RECOVERY


async def test_slow_bookie_times_out_and_is_replaced(store: MetadataStore) -> None:
    async with running_bookies(store, 3) as cluster, BookKeeper(store, timeout_s=0.5) as bk:
        wh = await bk.create_ledger(2, 2, 2)
        await wh.append(b"0")
        slow_address = wh.metadata.current_ensemble[1]
        slow = cluster.storage(slow_address)
        assert isinstance(slow, MemoryBookieStorage)
        slow.hold_adds()
        assert await wh.append(b"1") == 1  # times out on the slow bookie, then replaced
        assert slow_address not in wh.metadata.current_ensemble
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        assert await rh.read(0, 1) == [b"0", b"1"]
        slow.release_adds()


async def test_ensemble_change_after_fencing_fails_the_writer(store: MetadataStore) -> None:
    async with running_bookies(store, 3) as cluster, BookKeeper(store, timeout_s=1) as bk_a, \
            BookKeeper(store, timeout_s=1) as bk_b:  # fmt: skip
        writer = await bk_a.create_ledger(2, 2, 1)
        await writer.append(b"0")
        await bk_b.open_ledger(writer.ledger_id, recovery=True)  # metadata now CLOSED
        await cluster.stop_bookie(writer.metadata.current_ensemble[0])
        # the surviving bookie says FENCED, or the ensemble-change CAS finds the ledger CLOSED
        with pytest.raises(LedgerFencedError):
            await writer.append(b"1")


async def test_silent_bookie_times_out_on_the_trio_clock(
    store: MetadataStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A bookie that accepts connections but never answers: every wait ends at its timeout."""
    async with trio.open_nursery() as nursery:
        await silent_bookie(store, nursery)
        async with BookKeeper(store, timeout_s=10) as bk:
            wh = await bk.create_ledger(1, 1, 1)
            started = trio.current_time()
            from ledger_backend.client.errors import BKTimeoutError

            # the add times out, no other bookie answers: the add waits for one until its
            # deadline (4 client timeouts), then the handle fails
            with pytest.raises(BKTimeoutError):
                await wh.append(b"never stored")
            assert 40 <= trio.current_time() - started < 50

            with pytest.raises(BKTimeoutError):
                await bk.open_ledger(wh.ledger_id, recovery=False)
        nursery.cancel_scope.cancel()


async def test_connection_is_reestablished_after_a_bookie_restart(store: MetadataStore) -> None:
    storage = MemoryBookieStorage()
    async with trio.open_nursery() as nursery, BookKeeper(store, timeout_s=2) as bk:
        from ledger_backend.bookie.server import serve_bookie

        first = trio.CancelScope()

        async def serve(
            scope: trio.CancelScope, port: int, task_status: trio.TaskStatus[BookieAddress]
        ) -> None:
            with scope:
                await serve_bookie(storage, store, "127.0.0.1", port, drain_timeout_s=0.1,
                                   task_status=task_status)  # fmt: skip

        address = await nursery.start(serve, first, 0)
        wh = await bk.create_ledger(1, 1, 1)
        await wh.append(b"before restart")
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        assert await rh.read(0, 0) == [b"before restart"]
        first.cancel()
        await trio.sleep(0.1)
        with pytest.raises(LedgerError):
            await rh.read(0, 0)  # down: fails fast (connection refused), no hang
        await nursery.start(serve, trio.CancelScope(), address.port)  # same port, same data
        assert await rh.read(0, 0) == [b"before restart"]
        nursery.cancel_scope.cancel()


async def test_recovery_replaces_a_dead_bookie_before_rewriting(store: MetadataStore) -> None:
    async with running_bookies(store, 4) as cluster, BookKeeper(store, timeout_s=3) as bk_a, \
            BookKeeper(store, timeout_s=3) as bk_b:  # fmt: skip
        writer = await bk_a.create_ledger(3, 2, 2)
        for i in range(10):
            await writer.append(b"e%d" % i)
        ensemble = writer.metadata.current_ensemble
        dead = ensemble[0]  # holds entry 9 (write set {0, 1}), the one past the bookies' LAC
        await cluster.stop_bookie(dead)
        rh = await bk_b.open_ledger(writer.ledger_id, recovery=True)
        assert rh.last_add_confirmed == 9
        fragments = rh.metadata.ensembles
        assert [first for first, _ in fragments] == [0, 9]
        replacement = fragments[1][1][0]
        assert replacement not in ensemble and dead not in fragments[1][1]
        assert 9 in await _stored_entry_ids(cluster.storage(replacement), writer.ledger_id)
        assert await rh.read(0, 9) == [b"e%d" % i for i in range(10)]


async def test_close_after_another_client_recovered_raises_fenced(store: MetadataStore) -> None:
    async with running_bookies(store, 2), BookKeeper(store, timeout_s=2) as bk_a, \
            BookKeeper(store, timeout_s=2) as bk_b:  # fmt: skip
        writer = await bk_a.create_ledger(2, 2, 2)
        await writer.append(b"only")
        rh = await bk_b.open_ledger(writer.ledger_id, recovery=True)
        assert rh.last_add_confirmed == 0
        with pytest.raises(LedgerFencedError):  # closed at our very LAC, still: deposed
            await writer.close()
        data, _ = await store.get(ledger_path(writer.ledger_id))
        assert LedgerMetadata.from_json_bytes(data).last_entry_id == 0


async def test_explicit_lac_lets_readers_of_an_open_ledger_see_the_last_entry(
        store: MetadataStore) -> None:
    async with running_bookies(store, 3) as cluster, \
            BookKeeper(store, timeout_s=5, explicit_lac_delay_s=0.05) as bk:
        wh = await bk.create_ledger(3, 2, 2)
        for i in range(3):
            await wh.append(b"entry-%d" % i)
        rh = await bk.open_ledger(wh.ledger_id, recovery=False)
        # Within the delay the last add's LAC (1) is all the bookies heard ...
        with trio.fail_after(5):
            assert await rh.wait_for_lac(1, 5) == 2  # ... then the explicit LAC arrives
        assert await rh.read(2, 2) == [b"entry-2"]
        for bookie in wh.metadata.current_ensemble:
            storage = cluster.storage(bookie)
            assert storage.last_add_confirmed(wh.ledger_id) == 2
        await wh.close()
