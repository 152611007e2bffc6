"""A journal group write that fails with something other than an OSError (a bug in encoding,
say) fails the journal as a disk error does: the groups written after it are not acknowledged,
since their records follow a hole that replay stops at.  And, more generally (hypothesis):
whichever write fails and however, no acknowledged record is missing from replay."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import trio
from hypothesis import HealthCheck, given, settings
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


FAILURES = ["none", "oserror_before", "oserror_torn", "bug_before", "bug_torn"]


async def _journal_run(directory: Path, payloads: list[bytes], pauses: list[bool],
                       failure: str, fail_at: int, in_flight: int, preallocate: int
                       ) -> tuple[list[bytes], dict[bytes, BaseException | None], list[bytes]
                             ]:  # fmt: skip
    """Journal `payloads` (a checkpoint after each whose pause is set, so groups form; the
    rest once the journal task ended are not submitted), the `fail_at`-th group write failing
    as `failure` says: what was submitted, the answers, and what replay finds."""
    journal = Journal(directory, first_file_id=1, max_writes_in_flight=in_flight,
                      flush_when_queue_empty=True, preallocate_bytes=preallocate,
                      group_bytes=256)
    await journal.open()
    real_write = journal._write_and_sync
    writes: list[int] = []

    def failing_write(records: list[tuple[int, int, int, int, bytes]], offset: int,
                      *rest: Any) -> None:
        writes.append(1)
        if failure == "none" or len(writes) != fail_at:
            real_write(records, offset, *rest)
            return
        if failure.endswith("torn"):  # the first half of the group's first record reaches disk
            rec_type, ledger_id, entry_id, lac, payload = records[0]
            real_write([(rec_type, ledger_id, entry_id, lac, payload[: len(payload) // 2])],
                       offset, *rest)
        raise (OSError(5, "EIO") if failure.startswith("oserror") else EncodingBug("bug"))

    answers: dict[bytes, BaseException | None] = {}
    submitted: list[bytes] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            journal._write_and_sync = failing_write  # type: ignore[method-assign]
            for entry_id, (payload, pause) in enumerate(zip(payloads, pauses, strict=True)):
                submitted.append(payload)
                try:
                    journal.append_soon(TYPE_ADD, 1, entry_id, entry_id - 1, payload,
                                        lambda error, p=payload: answers.__setitem__(p, error))
                except JournalFailedError as exc:
                    answers[payload] = exc
                if pause:
                    await trio.sleep(0.001)
            with trio.fail_after(30):
                while len(answers) < len(submitted):  # noqa: ASYNC110
                    await trio.sleep(0.001)
            nursery.cancel_scope.cancel()
    except BaseException as exc:  # the journal task ends with what failed its write
        if failure == "none" or not isinstance(exc, BaseExceptionGroup):
            raise
    return submitted, answers, [r.payload for r in scan_all(directory)[0]]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(count=st.integers(1, 30), pauses=st.lists(st.booleans(), min_size=30, max_size=30),
       failure=st.sampled_from(FAILURES), fail_at=st.integers(1, 8),
       in_flight=st.integers(1, 3), preallocate=st.sampled_from([0, 64 << 10]))
def test_no_acknowledged_record_is_missing_from_replay(
        tmp_path_factory: pytest.TempPathFactory, count: int, pauses: list[bool], failure: str,
        fail_at: int, in_flight: int, preallocate: int) -> None:
    """Whatever write fails and how (a disk error or a bug, before writing or torn), with up to
    3 writes in flight and with or without preallocation: every record acknowledged is found
    by replay, in the order it was journaled; with no failure, every record is acknowledged."""
    payloads = [f"record-{i:03d}-".encode() * 8 for i in range(count)]
    submitted, answers, replayed = trio.run(
        _journal_run, tmp_path_factory.mktemp("journal"), payloads, pauses[:count], failure,
        fail_at, in_flight, preallocate)
    assert answers.keys() == set(submitted), "a journaled record was never answered"
    acknowledged = [p for p in submitted if answers[p] is None]
    assert [p for p in replayed if p in acknowledged] == acknowledged, (answers, replayed)
    if failure == "none":
        assert acknowledged == payloads
