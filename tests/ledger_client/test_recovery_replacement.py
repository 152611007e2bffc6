"""Recovery that replaces bookies which did not answer the fence.

1. The replacement fragment reaches the metadata store only together with CLOSED, after the
   recovered entries were written to it: a recovery that dies (or fails its recovery adds)
   leaves the metadata as the writer left it, so the next attempt reads the writer's own write
   sets and a replacement bookie (which holds nothing) never counts as a "no such entry"
   witness against an acknowledged entry.
2. If the closing CAS conflicts and the ensembles changed meanwhile, recovery raises instead of
   closing with bookies it did not write the recovered entries to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import trio

from ledger_backend.client import recovery
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.client_context import ClientContext
from ledger_backend.client.entry_format import encode_entry
from ledger_backend.client.errors import LedgerRecoveryError
from ledger_backend.client.ledger_metadata import LedgerMetadata, LedgerState
from ledger_backend.metadata import open_store
from tests.ledger_client.bookie_cluster import InProcessCluster, running_bookies

LEDGER_ID = 42
LAST_ACKED = 11  # acknowledged by b0 and b2 only (Qa = 2); entries 0..10 are on all three


@dataclass
class Setup:
    cluster: InProcessCluster
    ctx: ClientContext
    b0: str
    b1: str
    b2: str
    spare: str
    metadata: LedgerMetadata


@asynccontextmanager
async def writer_died_after_entry_11() -> AsyncIterator[Setup]:
    """E=3, Qw=3, Qa=2 on b0, b1, b2 with a fourth, spare bookie. The writer acknowledged
    entry 11 via b0 and b2 and died before b1 got it."""
    store = await open_store("memory:")
    async with running_bookies(store, 4) as cluster, BookKeeper(store, timeout_s=1.0) as bk:
        ctx = bk.context
        b0, b1, b2, spare = list(cluster.bookies)
        metadata = LedgerMetadata(3, 3, 2, ((0, (b0, b1, b2)),))
        await ctx.create_metadata(LEDGER_ID, metadata)
        length = 0
        for entry_id in range(LAST_ACKED + 1):
            data = b"entry-%d" % entry_id
            length += len(data)
            body = encode_entry(LEDGER_ID, entry_id, entry_id - 1, length, data)
            for bookie in (b0, b1, b2) if entry_id < LAST_ACKED else (b0, b2):
                await cluster.storage(bookie).add_entry(LEDGER_ID, entry_id, entry_id - 1, body)
        yield Setup(cluster, ctx, b0, b1, b2, spare, metadata)


def _slow_reads(setup: Setup, bookie: str, delay: float) -> None:
    """A read that finds data answers `delay` later than misses do (disk vs. index)."""
    storage = setup.cluster.storage(bookie)
    original = storage.read_entry

    async def slow_read(ledger_id: int, entry_id: int) -> bytes:
        await trio.sleep(delay)
        return await original(ledger_id, entry_id)

    storage.read_entry = slow_read  # type: ignore[method-assign]


async def _assert_closed_keeping_entry_11(setup: Setup) -> None:
    closed, _ = await recovery.recover_ledger(setup.ctx, LEDGER_ID)
    assert closed.state is LedgerState.CLOSED
    assert closed.last_entry_id == LAST_ACKED
    stored, _ = await setup.ctx.read_metadata(LEDGER_ID)
    assert stored == closed
    # b2 is down: entry 11 was re-written to a replacement, which the closed metadata names.
    write_set = closed.write_set_bookies(LAST_ACKED)
    assert setup.b2 not in write_set and setup.spare in write_set
    await setup.cluster.storage(setup.spare).read_entry(LEDGER_ID, LAST_ACKED)


@pytest.mark.parametrize("b0_read_delay", [0.0, 0.05])
async def test_recovery_that_dies_after_planning_replacement_leaves_metadata_unchanged(
    monkeypatch: pytest.MonkeyPatch, b0_read_delay: float
) -> None:
    async with writer_died_after_entry_11() as setup:
        await setup.cluster.stop_bookie(setup.b2)  # recoverer A cannot reach b2
        real_rewrite_batch = recovery._rewrite_batch

        async def die_before_rewriting(ctx, ledger_id, target, recovered):  # type: ignore[no-untyped-def]
            await target.write_metadata()  # plans the replacement of b2
            raise RuntimeError("recoverer A died")

        monkeypatch.setattr(recovery, "_rewrite_batch", die_before_rewriting)
        with pytest.raises(RuntimeError, match="recoverer A died"):
            await recovery.recover_ledger(setup.ctx, LEDGER_ID)
        monkeypatch.setattr(recovery, "_rewrite_batch", real_rewrite_batch)

        after_a, _ = await setup.ctx.read_metadata(LEDGER_ID)
        assert after_a.state is LedgerState.IN_RECOVERY
        assert after_a.ensembles == setup.metadata.ensembles  # no replacement fragment

        # Recoverer B: b1 answers "no such entry" for 11 fast, b0 has it but is slower.
        _slow_reads(setup, setup.b0, b0_read_delay)
        await _assert_closed_keeping_entry_11(setup)


async def test_recovery_whose_recovery_adds_fail_leaves_metadata_unchanged() -> None:
    async with writer_died_after_entry_11() as setup:
        await setup.cluster.stop_bookie(setup.b2)
        refused: list[str] = []

        def refuse_adds(bookie: str) -> None:
            storage = setup.cluster.storage(bookie)
            original = storage.add_entry

            async def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
                refused.append(bookie)
                raise RuntimeError("add refused")

            storage.add_entry = refuse  # type: ignore[method-assign]
            restore.append(lambda: setattr(storage, "add_entry", original))

        restore: list = []
        refuse_adds(setup.b1)
        refuse_adds(setup.spare)
        # Only b0 stores entry 11 (< Qa): recovery fails, the ledger stays IN_RECOVERY.
        with pytest.raises(LedgerRecoveryError):
            await recovery.recover_ledger(setup.ctx, LEDGER_ID)
        assert setup.spare in refused  # the replacement was written to before any metadata CAS
        after_a, _ = await setup.ctx.read_metadata(LEDGER_ID)
        assert after_a.state is LedgerState.IN_RECOVERY
        assert after_a.ensembles == setup.metadata.ensembles
        for undo in restore:
            undo()

        _slow_reads(setup, setup.b0, 0.05)
        await _assert_closed_keeping_entry_11(setup)


async def test_recovery_without_replacement_keeps_ensembles() -> None:
    async with writer_died_after_entry_11() as setup:
        closed, _ = await recovery.recover_ledger(setup.ctx, LEDGER_ID)
        assert closed.state is LedgerState.CLOSED
        assert closed.last_entry_id == LAST_ACKED
        assert closed.ensembles == setup.metadata.ensembles
        await setup.cluster.storage(setup.b1).read_entry(LEDGER_ID, LAST_ACKED)


async def test_close_conflict_with_changed_ensembles_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with writer_died_after_entry_11() as setup:
        ctx = setup.ctx
        real_cas = ctx.cas_metadata
        interfered = [False]

        async def cas_after_ensemble_change(ledger_id, metadata, version):  # type: ignore[no-untyped-def]
            if metadata.state is LedgerState.CLOSED and not interfered[0]:
                interfered[0] = True
                # Meanwhile someone else (e.g. another recovery) installed a fragment at 11
                # with b2 replaced by the spare, which holds nothing.
                current, current_version = await ctx.read_metadata(ledger_id)
                changed = current.with_new_ensemble(LAST_ACKED, (setup.b0, setup.b1, setup.spare))
                await real_cas(ledger_id, changed, current_version)
            return await real_cas(ledger_id, metadata, version)

        monkeypatch.setattr(ctx, "cas_metadata", cas_after_ensemble_change)
        with pytest.raises(LedgerRecoveryError, match="ensembles changed"):
            await recovery.recover_ledger(ctx, LEDGER_ID)
        assert interfered[0]
        stored, _ = await ctx.read_metadata(LEDGER_ID)
        assert stored.state is LedgerState.IN_RECOVERY  # not closed with the spare in it


async def test_close_conflict_with_same_ensembles_retries_and_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with writer_died_after_entry_11() as setup:
        ctx = setup.ctx
        real_cas = ctx.cas_metadata
        interfered = [False]

        async def cas_after_unrelated_change(ledger_id, metadata, version):  # type: ignore[no-untyped-def]
            if metadata.state is LedgerState.CLOSED and not interfered[0]:
                interfered[0] = True
                current, current_version = await ctx.read_metadata(ledger_id)
                changed = current.replace(custom_metadata={"k": b"v"})
                await real_cas(ledger_id, changed, current_version)
            return await real_cas(ledger_id, metadata, version)

        monkeypatch.setattr(ctx, "cas_metadata", cas_after_unrelated_change)
        closed, _ = await recovery.recover_ledger(ctx, LEDGER_ID)
        assert interfered[0]
        assert closed.state is LedgerState.CLOSED
        assert closed.last_entry_id == LAST_ACKED
        assert closed.ensembles == setup.metadata.ensembles
        assert dict(closed.custom_metadata) == {"k": b"v"}


async def test_close_conflict_with_concurrent_close_returns_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with writer_died_after_entry_11() as setup:
        ctx = setup.ctx
        real_cas = ctx.cas_metadata
        interfered = [False]

        async def cas_after_other_close(ledger_id, metadata, version):  # type: ignore[no-untyped-def]
            if metadata.state is LedgerState.CLOSED and not interfered[0]:
                interfered[0] = True
                await real_cas(ledger_id, metadata, version)  # another recovery closed first
            return await real_cas(ledger_id, metadata, version)

        monkeypatch.setattr(ctx, "cas_metadata", cas_after_other_close)
        closed, _ = await recovery.recover_ledger(ctx, LEDGER_ID)
        assert interfered[0]
        assert closed.state is LedgerState.CLOSED
        assert closed.last_entry_id == LAST_ACKED
