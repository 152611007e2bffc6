"""Managed ledger rewrites: closed ledgers swapped for rewritten copies by one CAS.

What must hold (ledger_swap.py): the list names either a run or its rewrite, never both or
neither; old ledgers go only after the swap; readers in a swapped-out ledger continue at the
first surviving entry at or after their position; a rewrite that dies before its swap leaves
only a pending ledger that the next owner deletes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import (
    InvalidPositionError,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    RewriteConflictError,
)
from ledger_backend.managed_ledger.metadata_format import (
    decode_managed_ledger,
    managed_ledger_path,
)
from ledger_backend.metadata import MetadataStore, open_store
from tests.managed_ledger.ml_test_support import FakeClock

NAME = "public/default/table-0"
ROOT = "/ledgerwire/managed-ledgers"


async def read_all(ml: ManagedLedger, start: Position | None = None) -> list[bytes]:
    position = start if start is not None else ml.first_position
    if position is None:
        return []
    return [e.data for e in await ml.read(position, 1_000_000)]


async def node_of(store: MetadataStore):  # type: ignore[no-untyped-def]
    path = managed_ledger_path(ROOT, NAME)
    return decode_managed_ledger((await store.get(path))[0], path)


async def filled(factory: ManagedLedgerFactory, ledgers: int, per: int) -> ManagedLedger:
    """A managed ledger with `ledgers` closed ledgers of `per` entries "L<i>-<j>" + current."""
    ml = await factory.open(NAME, ManagedLedgerConfig(max_entries_per_ledger=per))
    for i in range(ledgers):
        for j in range(per):
            await ml.append(b"L%d-%d" % (i, j))
    await ml.append(b"tail")  # rolls the last closed ledger over
    return ml


async def rewrite_keep(ml: ManagedLedger, runs: list[list[int]], keep) -> list[int]:  # type: ignore[no-untyped-def]
    """Rewrite each run (indexes into ml.ledgers) keeping entries where keep(data)."""
    ids = [info.ledger_id for info in ml.ledgers]
    rewrite = ml.rewrite()
    for run in runs:
        old_ids = [ids[i] for i in run]
        for old_id in old_ids:
            info = next(i for i in ml.ledgers if i.ledger_id == old_id)
            for entry in await ml.read(Position(old_id, 0), info.entries):
                if keep(entry.data):
                    await rewrite.write(entry.position, entry.data)
        await rewrite.end_run(old_ids)
    return await rewrite.commit()


def even(data: bytes) -> bool:
    return data.endswith((b"0", b"2", b"4", b"6", b"8"))


async def test_rewrite_swaps_runs_and_deletes_old_ledgers_after(
    factory: ManagedLedgerFactory, bk: MemoryBookKeeper, store: MetadataStore
) -> None:
    ml = await filled(factory, 3, 5)
    before = await read_all(ml)
    l1, l2, l3, current = (info.ledger_id for info in ml.ledgers)
    swapped = await rewrite_keep(ml, [[0, 1]], even)
    assert swapped == [l1, l2]
    expected = [d for d in before[:10] if even(d)] + before[10:]
    assert await read_all(ml) == expected
    ids = [info.ledger_id for info in ml.ledgers]
    assert len(ids) == 3 and ids[1:] == [l3, current] and ids[0] > current
    node = await node_of(store)
    assert [r.ledger_id for r in node.ledgers] == ids
    assert node.ledgers[0].replaced == (l1, l2)
    assert node.pending == [] and node.garbage == []
    listed = await bk.list_ledgers()
    assert l1 not in listed and l2 not in listed and ids[0] in listed
    # appends and rollover carry on after the rewritten front
    await ml.append(b"more")
    assert (await read_all(ml))[-2:] == [b"tail", b"more"]
    await ml.close()
    # a new owner reads the same log
    reopened = await ManagedLedgerFactory(store, bk).open(NAME)
    assert await read_all(reopened) == [*expected, b"more"]
    await reopened.close()


async def test_reader_in_a_swapped_ledger_continues_at_the_next_survivor(
    factory: ManagedLedgerFactory,
) -> None:
    ml = await filled(factory, 3, 5)
    l1, l2, l3, _ = (info.ledger_id for info in ml.ledgers)
    await rewrite_keep(ml, [[0, 1]], even)
    # L0-3 is gone: the next survivor at or after it is L0-4
    assert [e.data for e in await ml.read(Position(l1, 3), 2)] == [b"L0-4", b"L1-0"]
    assert [e.data for e in await ml.read(Position(l2, 1), 1)] == [b"L1-2"]
    # one past l2's end continues in l3
    assert [e.data for e in await ml.read(Position(l2, 5), 1)] == [b"L2-0"]
    after = ml.next_position(Position(l1, 4))
    assert after is not None and await ml.read_entry(after) == b"L1-0"
    # log order holds across the new (higher) id
    assert ml.position_key(Position(l1, 0)) < ml.position_key(Position(l3, 0))
    assert ml.position_key(ml.first_position) < ml.position_key(Position(l3, 0))  # type: ignore[arg-type]
    assert await ml.wait_for_entries(Position(l1, 2), 0.01)


async def test_a_run_with_no_survivor_vanishes_and_its_readers_move_on(
    factory: ManagedLedgerFactory, store: MetadataStore
) -> None:
    ml = await filled(factory, 3, 4)
    l1, l2, l3, current = (info.ledger_id for info in ml.ledgers)
    await rewrite_keep(ml, [[1]], lambda d: False)
    assert [info.ledger_id for info in ml.ledgers] == [l1, l3, current]
    assert [e.data for e in await ml.read(Position(l2, 2), 1)] == [b"L2-0"]
    assert (await node_of(store)).garbage == []


async def test_rewrites_chain_and_positions_follow(
    factory: ManagedLedgerFactory, bk: MemoryBookKeeper, store: MetadataStore
) -> None:
    ml = await filled(factory, 4, 4)
    l1, l2, l3, l4, current = (info.ledger_id for info in ml.ledgers)
    await rewrite_keep(ml, [[0], [1, 2]], lambda d: not d.endswith(b"1"))
    first, second = (info.ledger_id for info in ml.ledgers[:2])
    # the second pass folds both rewrites and l4 into one ledger, keeping only "-3"
    await rewrite_keep(ml, [[0, 1, 2]], lambda d: d.endswith(b"3"))
    assert await read_all(ml) == [b"L0-3", b"L1-3", b"L2-3", b"L3-3", b"tail"]
    node = await node_of(store)
    assert node.ledgers[0].replaced == (l1, max(l4, first, second))
    for old in (l1, l2, l3, first, second):
        assert [e.data for e in await ml.read(Position(old, 0), 1)][0].endswith(b"-3")
    assert [e.data for e in await ml.read(Position(l2, 0), 1)] == [b"L1-3"]
    await ml.close()
    # after a restart the in-memory moves are gone: a swapped-out position re-reads the
    # rewrite that covers it rather than skip anything
    reopened = await ManagedLedgerFactory(store, bk).open(NAME)
    assert [e.data for e in await reopened.read(Position(l3, 2), 1)] == [b"L0-3"]
    with pytest.raises(InvalidPositionError):
        await reopened.read(Position(l1 - 1, 0), 1)
    await reopened.close()


async def test_rewrite_conflicting_with_trim_changes_nothing(
    factory: ManagedLedgerFactory, bk: MemoryBookKeeper, store: MetadataStore
) -> None:
    ml = await filled(factory, 3, 3)
    l1 = ml.ledgers[0].ledger_id
    rewrite = ml.rewrite()
    for entry in await ml.read(Position(l1, 0), 3):
        await rewrite.write(entry.position, entry.data)
    output = rewrite.outputs[0]
    assert (await node_of(store)).pending == [output]
    await rewrite.end_run([l1])
    await ml.delete_ledgers_before(ml.ledgers[1].ledger_id)  # trims l1 under the rewrite
    with pytest.raises(RewriteConflictError):
        await rewrite.commit()
    assert (await node_of(store)).pending == []
    assert output not in await bk.list_ledgers()
    assert (await read_all(ml))[0] == b"L1-0"


async def test_abort_deletes_the_outputs(
    factory: ManagedLedgerFactory, bk: MemoryBookKeeper, store: MetadataStore
) -> None:
    ml = await filled(factory, 2, 3)
    l1 = ml.ledgers[0].ledger_id
    rewrite = ml.rewrite()
    entry = (await ml.read(Position(l1, 0), 1))[0]
    await rewrite.write(entry.position, entry.data)
    output = rewrite.outputs[0]
    await rewrite.abort()
    assert output not in await bk.list_ledgers()
    assert (await node_of(store)).pending == []
    assert len(await read_all(ml)) == 7


async def test_the_open_ledger_is_never_rewritten(factory: ManagedLedgerFactory) -> None:
    ml = await filled(factory, 1, 3)
    current = ml.current_ledger_id
    rewrite = ml.rewrite()
    await rewrite.end_run([current])
    with pytest.raises(RewriteConflictError):
        await rewrite.commit()
    assert await read_all(ml) == [b"L0-0", b"L0-1", b"L0-2", b"tail"]


@pytest.mark.parametrize("stop", ["after_pending", "before_swap", "after_swap"])
async def test_an_owner_dying_mid_rewrite_leaves_a_whole_log(
    store: MetadataStore, bk: MemoryBookKeeper, clock: FakeClock, stop: str
) -> None:
    """In-process twin of the kill -9 test: the old owner stops at a step and a new owner
    opens; the log is either the old one or the rewritten one, and no ledger leaks."""
    ml = await filled(ManagedLedgerFactory(store, bk, clock=clock), 2, 4)
    before = await read_all(ml)
    l1, l2 = (info.ledger_id for info in ml.ledgers[:2])
    rewrite = ml.rewrite()
    for entry in await ml.read(Position(l1, 0), 8):
        if even(entry.data):
            await rewrite.write(entry.position, entry.data)
    output = rewrite.outputs[0]
    if stop != "after_pending":
        await rewrite.end_run([l1, l2])
    if stop == "after_swap":
        from ledger_backend.managed_ledger import ledger_swap

        runs: list[tuple[list[int], int | None, int, int, dict[int, int],
                         dict[int, list[int]]]] = [
            ([l1, l2], output, 4, 16, {l1: 0, l2: 2}, {l1: [0, 2], l2: [0, 2]})]
        await ledger_swap.swap_runs(ml, runs)  # the swap, without the deletion after it
    # the owner dies here (never closed); a new owner opens
    new = await ManagedLedgerFactory(store, bk, clock=clock).open(NAME)
    node = await node_of(store)
    assert node.pending == [] and node.garbage == []
    got = await read_all(new)
    listed = await bk.list_ledgers()
    if stop == "after_swap":
        assert got == [d for d in before if even(d) or d == b"tail"]
        assert l1 not in listed and l2 not in listed
    else:
        assert got == before
        assert output not in listed
    await new.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    keep_bits=st.lists(st.booleans(), min_size=30, max_size=30),
    cuts=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_any_rewrite_keeps_order_and_relocates_every_position(
    sizes: list[int], keep_bits: list[bool], cuts: list[bool]
) -> None:
    import trio

    async def main() -> None:
        store = await open_store("memory:")
        async with MemoryBookKeeper(store) as bk:
            factory = ManagedLedgerFactory(store, bk, clock=FakeClock())
            ml = await factory.open(NAME, ManagedLedgerConfig(max_entries_per_ledger=100))
            datas: list[bytes] = []
            for i, size in enumerate(sizes):
                for j in range(size):
                    datas.append(b"%d-%d" % (i, j))
                    await ml.append(datas[-1])
                ml.config.max_entries_per_ledger = 1  # roll over at the next append
                await ml.append(b"x%d" % i)
                datas.append(b"x%d" % i)
                ml.config.max_entries_per_ledger = 100
            infos = ml.ledgers[:-1]  # closed ones
            entries = await ml.read(ml.first_position, 1000)  # type: ignore[arg-type]
            keep = {e.position: keep_bits[k % 30] for k, e in enumerate(entries)}
            runs: list[list[int]] = [[]]
            for n, info in enumerate(infos):
                runs[-1].append(info.ledger_id)
                if cuts[n % 5]:
                    runs.append([])
            rewrite = ml.rewrite()
            for run in [r for r in runs if r]:
                for e in entries:
                    if e.position.ledger_id in run and keep[e.position]:
                        await rewrite.write(e.position, e.data)
                await rewrite.end_run(run)
            await rewrite.commit()
            closed_ids = {info.ledger_id for info in infos}
            survivors = [e for e in entries
                         if e.position.ledger_id not in closed_ids or keep[e.position]]
            assert await read_all(ml) == [e.data for e in survivors]
            for k, e in enumerate(entries):
                want = next((s.data for s in entries[k:] if s in survivors), None)
                got = await ml.read(e.position, 1)
                assert (got[0].data if got else None) == want, (e.position, k)
            await ml.close()
        await store.close()

    trio.run(main)
