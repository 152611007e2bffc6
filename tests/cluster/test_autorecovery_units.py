"""Auto-recovery pieces without processes: which fragments name a lost bookie and where they
end, and the under-replication marks (create, merge, CAS-guarded clear, per-ledger lock)."""

from __future__ import annotations

import itertools

import pytest

from ledger_backend.autorecovery.fragment_copy import fragment_last_entry, fragments_on
from ledger_backend.autorecovery.under_replication import (
    clear_mark,
    list_underreplicated,
    mark_underreplicated,
    read_mark,
    try_lock,
    unlock,
)
from ledger_backend.client.ledger_metadata import LedgerMetadata, LedgerState
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import BadVersionError

_names = itertools.count()


def metadata(state: LedgerState, last: int) -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, ensembles=((0, ("a", "b", "c")), (10, ("a", "d", "c")),
                                              (20, ("e", "d", "c"))),
                          state=state, last_entry_id=last)


def test_fragments_and_their_ends() -> None:
    closed = metadata(LedgerState.CLOSED, 25)
    assert fragments_on(closed, {"a"}) == [0, 1]
    assert fragments_on(closed, {"c"}) == [0, 1, 2]
    assert fragments_on(closed, {"z"}) == []
    assert [fragment_last_entry(closed, i) for i in range(3)] == [9, 19, 25]
    open_ledger = metadata(LedgerState.OPEN, -1)
    assert fragment_last_entry(open_ledger, 2) is None  # still being written
    assert fragment_last_entry(open_ledger, 1) == 19


async def test_marks_merge_and_clear_only_when_unchanged() -> None:
    store = await open_store(f"memory:ar-{next(_names)}")
    try:
        assert await mark_underreplicated(store, 7, {"a"})
        assert not await mark_underreplicated(store, 7, {"b"})
        assert await list_underreplicated(store) == [7]
        mark = await read_mark(store, 7)
        assert mark is not None and mark[0]["lost"] == ["a", "b"]
        await mark_underreplicated(store, 7, {"c"})  # extended after the worker read it
        with pytest.raises(BadVersionError):
            await clear_mark(store, 7, mark[1])
        fresh = await read_mark(store, 7)
        assert fresh is not None
        await clear_mark(store, 7, fresh[1])
        assert await list_underreplicated(store) == []
        assert await try_lock(store, 7)
        assert not await try_lock(store, 7)
        await unlock(store, 7)
        assert await try_lock(store, 7)
    finally:
        await store.close()
