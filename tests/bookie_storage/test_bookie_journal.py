"""Journal: record encoding, group commit triggers, rollover, replay and torn-tail handling."""

from __future__ import annotations

import os
from pathlib import Path

import hypothesis.strategies as st
import pytest
import trio
from hypothesis import HealthCheck, given, settings

from ledger_backend.bookie.file_format import FILE_HEADER_SIZE, pack_file_header
from ledger_backend.bookie.journal import Journal, JournalFailedError
from ledger_backend.bookie.journal_format import (
    JOURNAL_FILE_VERSION,
    JOURNAL_MAGIC,
    RECORD_HEADER_SIZE,
    TYPE_ADD,
    TYPE_DELETE,
    TYPE_FENCE,
    JournalRecord,
    LogMark,
    encode_record,
    journal_file_name,
    list_journal_files,
)
from ledger_backend.bookie.journal_scanner import JournalScanner, ReplayStop

START = LogMark(0, 0)


def scan_all(directory: Path, mark: LogMark = START) -> tuple[list[JournalRecord], ReplayStop]:
    scanner = JournalScanner(directory, mark)
    records: list[JournalRecord] = []
    while batch := scanner.next_batch(1 << 20):
        records.extend(r for r, _ in batch)
    scanner.close()
    assert scanner.stop is not None
    return records, scanner.stop


def write_journal_file(directory: Path, file_id: int, records: list[JournalRecord]) -> bytes:
    data = bytearray(pack_file_header(JOURNAL_MAGIC, JOURNAL_FILE_VERSION, file_id))
    for r in records:
        data += encode_record(r.type, r.ledger_id, r.entry_id, r.lac, r.payload) + r.payload
    (directory / journal_file_name(file_id)).write_bytes(bytes(data))
    return bytes(data)


async def open_journal(directory: Path, **kwargs: object) -> Journal:
    journal = Journal(directory, first_file_id=1, **kwargs)  # type: ignore[arg-type]
    await journal.open()
    return journal


async def test_appended_records_replay_in_order(tmp_path: Path) -> None:
    journal = await open_journal(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        await journal.append(TYPE_ADD, 7, 0, -1, b"zero")
        await journal.append(TYPE_FENCE, 7, -1, 0)
        await journal.append(TYPE_DELETE, 8, -1, -1)
        nursery.cancel_scope.cancel()
    records, stop = scan_all(tmp_path)
    assert records == [
        JournalRecord(TYPE_ADD, 7, 0, -1, b"zero"),
        JournalRecord(TYPE_FENCE, 7, -1, 0, b""),
        JournalRecord(TYPE_DELETE, 8, -1, -1, b""),
    ]
    assert stop.clean


async def test_concurrent_appends_share_one_group_and_fsync(tmp_path: Path) -> None:
    journal = await open_journal(tmp_path, max_group_wait_s=0.05, group_bytes=1 << 30)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        async with trio.open_nursery() as adders:
            for i in range(20):
                adders.start_soon(journal.append, TYPE_ADD, 1, i, i - 1, b"x" * 100)
        nursery.cancel_scope.cancel()
    assert journal.groups_written == 1
    assert journal.triggers["max_wait"] == 1
    assert len(scan_all(tmp_path)[0]) == 20


async def test_bytes_trigger_writes_before_max_wait(tmp_path: Path) -> None:
    journal = await open_journal(tmp_path, max_group_wait_s=30.0, group_bytes=4096)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        with trio.fail_after(5):
            async with trio.open_nursery() as adders:
                for i in range(4):
                    adders.start_soon(journal.append, TYPE_ADD, 1, i, -1, b"y" * 2000)
        nursery.cancel_scope.cancel()
    assert journal.triggers["bytes"] >= 1
    assert journal.triggers["max_wait"] == 0


async def test_queue_empty_trigger(tmp_path: Path) -> None:
    journal = await open_journal(
        tmp_path, max_group_wait_s=30.0, group_bytes=1 << 30, flush_when_queue_empty=True
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        with trio.fail_after(5):
            await journal.append(TYPE_ADD, 1, 0, -1, b"z")
        nursery.cancel_scope.cancel()
    assert journal.triggers["queue_empty"] == 1


def gate_fdatasync(monkeypatch: pytest.MonkeyPatch) -> tuple[trio.Event, trio.Event]:
    """From now on fdatasync sets the first event, then waits for the second."""
    synced = trio.Event()
    gate = trio.Event()
    token = trio.lowlevel.current_trio_token()
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        trio.from_thread.run_sync(synced.set, trio_token=token)
        trio.from_thread.run(gate.wait, trio_token=token)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    return synced, gate


async def test_add_is_not_acknowledged_before_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = await open_journal(tmp_path)
    synced, gate = gate_fdatasync(monkeypatch)
    acked = trio.Event()

    async def add() -> None:
        await journal.append(TYPE_ADD, 1, 0, -1, b"payload")
        acked.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        nursery.start_soon(add)
        await synced.wait()
        await trio.sleep(0.05)
        assert not acked.is_set()  # written, fsync in progress: no acknowledgement yet
        gate.set()
        with trio.fail_after(5):
            await acked.wait()
        nursery.cancel_scope.cancel()


async def test_rollover_by_size_and_trim(tmp_path: Path) -> None:
    journal = await open_journal(tmp_path, max_file_bytes=4096, max_group_wait_s=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        for i in range(20):
            await journal.append(TYPE_ADD, 1, i, -1, b"a" * 1000)
        files = list_journal_files(tmp_path)
        assert len(files) >= 5
        removed = await journal.trim_before(journal.current_file_id)
        assert removed == files[:-1]
        assert list_journal_files(tmp_path) == [journal.current_file_id]
        nursery.cancel_scope.cancel()


def test_replay_starts_at_mark_and_crosses_files(tmp_path: Path) -> None:
    recs = [JournalRecord(TYPE_ADD, 1, i, i - 1, bytes([i]) * 10) for i in range(6)]
    write_journal_file(tmp_path, 1, recs[:3])
    write_journal_file(tmp_path, 2, recs[3:])
    mark = LogMark(1, FILE_HEADER_SIZE + 2 * (RECORD_HEADER_SIZE + 10))
    records, stop = scan_all(tmp_path, mark)
    assert records == recs[2:]
    assert stop.clean


def test_replay_stops_at_bad_header_file(tmp_path: Path) -> None:
    write_journal_file(tmp_path, 1, [JournalRecord(TYPE_ADD, 1, 0, -1, b"ok")])
    (tmp_path / journal_file_name(2)).write_bytes(b"NOPE" + bytes(12))
    records, stop = scan_all(tmp_path)
    assert len(records) == 1
    assert not stop.clean and stop.file_id == 2 and "magic" in stop.reason


record_strategy = st.builds(
    JournalRecord,
    st.sampled_from([TYPE_ADD, TYPE_FENCE, TYPE_DELETE]),
    st.integers(0, 2**64 - 1),
    st.integers(-1, 2**63 - 1),
    st.integers(-1, 2**63 - 1),
    st.binary(max_size=300),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=st.lists(record_strategy, max_size=25),
    cut=st.floats(0, 1),
    flip=st.one_of(st.none(), st.tuples(st.floats(0, 1), st.integers(1, 255))),
)
def test_replay_returns_exactly_a_prefix_of_good_records(
    tmp_path_factory: pytest.TempPathFactory,
    records: list[JournalRecord],
    cut: float,
    flip: tuple[float, int] | None,
) -> None:
    directory = tmp_path_factory.mktemp("j")
    data = bytearray(write_journal_file(directory, 1, records))
    boundaries = [FILE_HEADER_SIZE]
    for r in records:
        boundaries.append(boundaries[-1] + RECORD_HEADER_SIZE + len(r.payload))
    length = FILE_HEADER_SIZE + int(cut * (len(data) - FILE_HEADER_SIZE))
    del data[length:]
    damaged_at = None
    if flip is not None and length > FILE_HEADER_SIZE:
        pos = FILE_HEADER_SIZE + int(flip[0] * (length - FILE_HEADER_SIZE - 1))
        data[pos] ^= flip[1]
        damaged_at = pos
    (directory / journal_file_name(1)).write_bytes(bytes(data))
    replayed, stop = scan_all(directory)
    # whole records before the cut and before the damaged byte are the only ones possible
    limit = length if damaged_at is None else min(length, damaged_at)
    intact = [i for i in range(len(records)) if boundaries[i + 1] <= limit]
    assert replayed == records[: len(intact)]
    # the end is clean when nothing but zeroes follows the last whole record (a cut so early
    # that only zero bytes of the torn record remain is indistinguishable from preallocation)
    assert stop.clean == (not any(data[boundaries[len(intact)] :]))
    if not stop.clean:
        assert stop.offset == boundaries[len(intact)]


async def test_write_failure_fails_the_group_and_later_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = await open_journal(tmp_path)

    def broken_fdatasync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken_fdatasync)
    errors: list[BaseException] = []

    async def add() -> None:
        try:
            await journal.append(TYPE_ADD, 1, 0, -1, b"never acknowledged")
        except JournalFailedError as exc:
            errors.append(exc)

    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            nursery.start_soon(add)
    assert info.group_contains(OSError)
    assert len(errors) == 1
    with pytest.raises(JournalFailedError):
        await journal.append(TYPE_ADD, 1, 1, -1, b"refused")


async def test_append_soon_calls_back_after_fsync_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record journaled without a waiting task (an in-process add) is reported done only
    once its group is fsynced, and lands in order with the appends around it."""
    journal = await open_journal(tmp_path, flush_when_queue_empty=True)
    synced, gate = gate_fdatasync(monkeypatch)
    outcomes: list[BaseException | None] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        journal.append_soon(TYPE_ADD, 1, 0, -1, b"soon 0", outcomes.append)
        journal.append_soon(TYPE_ADD, 1, 1, 0, b"soon 1", outcomes.append)
        await synced.wait()
        await trio.sleep(0.05)
        assert outcomes == []  # written, fsync in progress: not done yet
        gate.set()
        with trio.fail_after(5):
            await journal.append(TYPE_ADD, 1, 2, 1, b"awaited 2")
        assert outcomes == [None, None]
        nursery.cancel_scope.cancel()
    records, _ = scan_all(tmp_path)
    assert [r.payload for r in records] == [b"soon 0", b"soon 1", b"awaited 2"]


async def test_append_soon_reports_a_failed_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = await open_journal(tmp_path, flush_when_queue_empty=True)

    def broken_fdatasync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken_fdatasync)
    outcomes: list[BaseException | None] = []
    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            journal.append_soon(TYPE_ADD, 1, 0, -1, b"never acknowledged", outcomes.append)
    assert info.group_contains(OSError)
    assert len(outcomes) == 1 and isinstance(outcomes[0], JournalFailedError)
    assert journal.failed
    with pytest.raises(JournalFailedError):
        journal.append_soon(TYPE_ADD, 1, 1, -1, b"refused", outcomes.append)
