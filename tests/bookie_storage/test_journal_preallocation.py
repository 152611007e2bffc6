"""Journal preallocation: zero-filled tails end a file cleanly; torn records and zero gaps
before later bytes still stop the scan; the writer fills ahead and cuts files back."""

from __future__ import annotations

import os
from pathlib import Path

import hypothesis.strategies as st
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from test_bookie_journal import scan_all, write_journal_file

from ledger_backend.bookie.file_format import FILE_HEADER_SIZE
from ledger_backend.bookie.journal import Journal
from ledger_backend.bookie.journal_format import (
    RECORD_HEADER_SIZE,
    TYPE_ADD,
    JournalRecord,
    encode_record,
    journal_file_name,
    list_journal_files,
)

record_strategy = st.builds(
    lambda ledger, entry, payload: JournalRecord(TYPE_ADD, ledger, entry, entry - 1, payload),
    st.integers(0, 2**20),
    st.integers(0, 2**20),
    st.binary(max_size=300),
)
# a record to tear: its last byte is not zero, so zeroes after a prefix never complete it
torn_strategy = st.builds(
    lambda ledger, payload: JournalRecord(TYPE_ADD, ledger, 0, -1, payload + b"\x01"),
    st.integers(0, 2**20),
    st.binary(max_size=300),
)


def encoded(r: JournalRecord) -> bytes:
    return encode_record(r.type, r.ledger_id, r.entry_id, r.lac, r.payload) + r.payload


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=st.lists(record_strategy, max_size=12),
    torn=st.one_of(st.none(), st.tuples(torn_strategy, st.floats(0, 1))),
    zeros=st.integers(0, 5000),
    later=st.one_of(st.none(), record_strategy),
)
def test_zero_tail_ends_cleanly_and_nothing_after_a_gap_or_tear_is_returned(
    tmp_path_factory: pytest.TempPathFactory,
    records: list[JournalRecord],
    torn: tuple[JournalRecord, float] | None,
    zeros: int,
    later: JournalRecord | None,
) -> None:
    """Good records, then maybe a torn one (a prefix of it), then zeroes (preallocation, or a
    group that never reached the disk), then maybe a later group's whole record."""
    directory = tmp_path_factory.mktemp("j")
    data = bytearray(write_journal_file(directory, 1, records))
    good_end = len(data)
    if torn is not None:
        raw = encoded(torn[0])
        data += raw[: int(torn[1] * (len(raw) - 1))]  # never the whole record
    data += bytes(zeros)
    if later is not None and len(data) > good_end:  # after a gap or a tear, not the next one
        data += encoded(later)
    (directory / journal_file_name(1)).write_bytes(bytes(data))
    replayed, stop = scan_all(directory)
    assert replayed == records  # never the torn one, never one after a gap
    assert stop.offset == good_end
    assert stop.clean == (not any(data[good_end:]))


def test_a_zero_tail_continues_into_the_next_file(tmp_path: Path) -> None:
    first = [JournalRecord(TYPE_ADD, 1, e, e - 1, b"x" * 100) for e in range(3)]
    second = [JournalRecord(TYPE_ADD, 1, e, e - 1, b"y" * 100) for e in range(3, 5)]
    data = write_journal_file(tmp_path, 1, first)
    (tmp_path / journal_file_name(1)).write_bytes(data + bytes(1 << 16))
    write_journal_file(tmp_path, 2, second)
    replayed, stop = scan_all(tmp_path)
    assert replayed == first + second
    assert stop.clean and stop.file_id == 2


async def test_the_writer_fills_ahead_and_cuts_files_back(tmp_path: Path) -> None:
    """Groups placed over a fill in flight, rollovers and a clean close: every record replays
    in order, each closed file ends at its last record, and the open one ran ahead."""
    journal = Journal(tmp_path, first_file_id=1, group_bytes=64 * 1024,
                      max_file_bytes=2 << 20, preallocate_bytes=1 << 20,
                      flush_when_queue_empty=True, max_writes_in_flight=2)
    await journal.open()
    payloads = [bytes([i % 251]) * (1000 + 97 * i) for i in range(300)]
    ran_ahead = []

    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)

        async def writer(first: int) -> None:
            for i in range(first, len(payloads), 4):
                await journal.append(TYPE_ADD, first, i, i - 1, payloads[i])
                current = tmp_path / journal_file_name(journal.current_file_id)
                ran_ahead.append(current.stat().st_size > journal.written_mark.offset)

        async with trio.open_nursery() as writers:
            for first in range(4):
                writers.start_soon(writer, first)
        nursery.cancel_scope.cancel()
    assert any(ran_ahead)
    replayed, stop = scan_all(tmp_path)
    assert stop.clean
    assert sorted((r.entry_id, r.payload) for r in replayed) == list(enumerate(payloads))
    files = list_journal_files(tmp_path)
    assert len(files) > 1
    for file_id in files:  # closed by a rollover or by the clean close: no zero tail left
        path = tmp_path / journal_file_name(file_id)
        size = FILE_HEADER_SIZE + sum(
            RECORD_HEADER_SIZE + len(r.payload) for r in scan_all_file(tmp_path, file_id))
        assert path.stat().st_size == size


def scan_all_file(directory: Path, file_id: int) -> list[JournalRecord]:
    only = directory / f"only-{file_id}"
    only.mkdir()
    (only / journal_file_name(file_id)).write_bytes(
        (directory / journal_file_name(file_id)).read_bytes())
    records, stop = scan_all(only)
    assert stop.clean
    return records


async def test_a_cut_back_removes_only_zeroes_and_runs_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ftruncate of a journal file (a rollover's, the clean close's) happens with no
    other group write and no zero fill in flight, and cuts off nothing but zeroes."""
    journal = Journal(tmp_path, first_file_id=1, group_bytes=16 * 1024,
                      max_file_bytes=256 * 1024, preallocate_bytes=64 * 1024,
                      flush_when_queue_empty=True, max_writes_in_flight=2)
    await journal.open()
    cuts: list[tuple[int, int]] = []
    problems: list[str] = []
    real_ftruncate = os.ftruncate

    def ftruncate(fd: int, length: int) -> None:  # in a worker thread
        others = [g for g in list(journal._writing) if not g.starts_file]
        if others or journal._zero_fill.in_flight is not None:
            problems.append(f"cut to {length} beside {len(others)} writes, "
                            f"fill {journal._zero_fill.in_flight}")
        size = os.fstat(fd).st_size
        if any(os.pread(fd, size - length, length)):
            problems.append(f"cut to {length} of {size} drops non-zero bytes")
        cuts.append((length, size))
        real_ftruncate(fd, length)

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    payloads = [bytes([1 + i % 250]) * (500 + 37 * i) for i in range(400)]
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)

        async def writer(first: int) -> None:
            for i in range(first, len(payloads), 4):
                await journal.append(TYPE_ADD, first, i, i - 1, payloads[i])

        async with trio.open_nursery() as writers:
            for first in range(4):
                writers.start_soon(writer, first)
        nursery.cancel_scope.cancel()
    assert problems == []
    assert len(cuts) >= 3 and any(size > length for length, size in cuts), cuts
    replayed, stop = scan_all(tmp_path)
    assert stop.clean
    assert sorted((r.entry_id, r.payload) for r in replayed) == list(enumerate(payloads))
