"""The journal's close: an add that arrives while the closing write is in its thread (or after
the close) is refused, never acknowledged without being on disk, never left waiting forever."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from test_bookie_journal import scan_all

from ledger_backend.bookie.journal import Journal, JournalFailedError
from ledger_backend.bookie.journal_format import TYPE_ADD
from ledger_backend.bookie.storage import DurableBookieStorage
from ledger_backend.bookie.storage_api import BookieStorageConfig


@pytest.mark.parametrize("preallocate", [0, 1 << 20])
async def test_an_add_during_the_closing_write_is_refused_or_on_disk(
    tmp_path: Path, preallocate: int
) -> None:
    journal = Journal(tmp_path, first_file_id=1, preallocate_bytes=preallocate)
    await journal.open()
    in_thread, go_on = threading.Event(), threading.Event()
    real_write = journal._write_and_sync

    def held_write(*args: Any) -> None:  # the closing write: done, then held before release
        real_write(*args)
        in_thread.set()
        go_on.wait(30)

    answers: list[str] = []

    async def late_add() -> None:
        try:
            await journal.append(TYPE_ADD, 1, 1, 0, b"late")
            answers.append("acknowledged")
        except JournalFailedError:
            answers.append("refused")

    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as inner:
            await inner.start(journal.run)
            journal._write_and_sync = held_write  # type: ignore[method-assign]
            journal.append_soon(TYPE_ADD, 1, 0, -1, b"pending", lambda error: None)
            inner.cancel_scope.cancel()  # the journal task writes the pending group as it closes

            async def add_while_the_closing_write_runs() -> None:
                await trio.to_thread.run_sync(in_thread.wait, 30)
                async with trio.open_nursery() as adds:
                    adds.start_soon(late_add)
                    await trio.testing.wait_all_tasks_blocked()  # the add is queued (or refused)
                    go_on.set()

            outer.start_soon(add_while_the_closing_write_runs)
    assert in_thread.is_set()
    payloads = [r.payload for r in scan_all(tmp_path)[0]]
    assert b"pending" in payloads
    assert answers == ["refused"] or b"late" in payloads, (answers, payloads)
    with trio.fail_after(10):  # after the close: refused at once, not a wait for ever
        with pytest.raises(JournalFailedError):
            await journal.append(TYPE_ADD, 1, 2, 1, b"after")


async def test_a_storage_whose_journal_closed_refuses_adds_without_raising_or_waiting(
    bookie_config: BookieStorageConfig,
) -> None:
    """The journal task ended (its nursery cancelled) while the storage still takes adds: an
    in-process add is declined (False, nothing applied) so the waiting path answers it, and
    that path gets the journal's refusal; neither raises from the wrong place nor waits."""
    storage = DurableBookieStorage(bookie_config, None)
    try:
        async with trio.open_nursery() as nursery:
            await storage.start(nursery)
            nursery.cancel_scope.cancel()
        assert storage.journal is not None and storage.journal.closed
        answers: list[BaseException | None] = []
        assert storage.start_add_entry(5, 0, -1, b"x", answers.append) is False
        assert answers == [] and storage.last_entry_id(5) == -1
        with trio.fail_after(10), pytest.raises(JournalFailedError):
            await storage.add_entry(5, 0, -1, b"x")
    finally:
        await storage.close_files()
