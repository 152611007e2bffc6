"""A journal group write that fails with something other than an OSError (a bug in encoding,
say) fails the journal as a disk error does: the groups written after it are not acknowledged,
since their records follow a hole that replay stops at."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio
from test_bookie_journal import scan_all

from ledger_backend.bookie.journal import Journal, JournalFailedError
from ledger_backend.bookie.journal_format import TYPE_ADD


class EncodingBug(RuntimeError):
    pass


@pytest.mark.parametrize("preallocate", [0, 1 << 20])
async def test_a_write_failing_with_a_bug_fails_the_groups_after_it(
    tmp_path: Path, preallocate: int
) -> None:
    journal = Journal(tmp_path, first_file_id=1, max_writes_in_flight=2,
                      flush_when_queue_empty=True, preallocate_bytes=preallocate)
    await journal.open()
    real_write = journal._write_and_sync
    second_written = threading.Event()
    calls: list[int] = []

    def first_fails_after_the_second(*args: Any) -> None:
        calls.append(1)
        if len(calls) == 1:  # the first group: fails once the second is on disk
            second_written.wait(30)
            raise EncodingBug("record encoding failed")
        real_write(*args)
        second_written.set()

    answers: dict[bytes, BaseException | None] = {}

    def add(payload: bytes, entry_id: int) -> None:
        journal.append_soon(TYPE_ADD, 1, entry_id, -1, payload,
                            lambda error: answers.__setitem__(payload, error))

    with pytest.RaisesGroup(EncodingBug, allow_unwrapped=True, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            journal._write_and_sync = first_fails_after_the_second  # type: ignore[method-assign]
            add(b"first", 0)
            with trio.fail_after(30):
                while not calls:  # noqa: ASYNC110 (the first group's thread started)
                    await trio.sleep(0.001)
                add(b"second", 1)
                while len(answers) < 2:  # noqa: ASYNC110
                    await trio.sleep(0.001)
    on_disk = {r.payload for r in scan_all(tmp_path)[0]}
    acknowledged = {p for p, error in answers.items() if error is None}
    assert acknowledged <= on_disk, (answers, on_disk)
    assert isinstance(answers[b"second"], JournalFailedError)
