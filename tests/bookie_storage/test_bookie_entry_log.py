"""Entry logs and the entry-location index (in memory and the index log on disk)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledger_backend.bookie.entry_index import (
    REC_LOCATIONS,
    EntryIndex,
    IndexLog,
    IndexLogCorruptError,
    encode_deletes,
    encode_index_record,
    encode_state_record,
)
from ledger_backend.bookie.entry_log import (
    ENTRY_HEADER_SIZE,
    EntryLogCorruptError,
    EntryLogDirectory,
    EntryLogWriter,
    location_of,
    split_location,
)
from ledger_backend.bookie.file_format import FILE_HEADER_SIZE
from ledger_backend.bookie.ledger_state import LedgerState


def test_location_packs_log_id_and_offset() -> None:
    loc = location_of(7, 123456)
    assert loc == 7 << 32 | 123456
    assert split_location(loc) == (7, 123456)


def test_entries_written_sorted_read_back_and_roll_over(tmp_path: Path) -> None:
    logs = EntryLogDirectory(tmp_path)
    writer = EntryLogWriter(logs, max_bytes=FILE_HEADER_SIZE + 3 * (ENTRY_HEADER_SIZE + 100))
    entries = [(1, e, bytes([e]) * 100) for e in range(7)]
    locations = writer.write(entries)
    writer.sync()
    assert len({split_location(loc)[0] for loc in locations}) == 3  # 3 + 3 + 1
    for (ledger, entry, payload), loc in zip(entries, locations, strict=True):
        assert logs.read_entry(loc, len(payload), ledger, entry) == payload
    writer.close()
    # a fresh directory object never reuses an id
    assert EntryLogDirectory(tmp_path).allocate_id() == max(logs.log_ids()) + 1


def test_corrupted_entry_is_refused(tmp_path: Path) -> None:
    logs = EntryLogDirectory(tmp_path)
    writer = EntryLogWriter(logs, max_bytes=1 << 20)
    [loc] = writer.write([(5, 0, b"hello world")])
    writer.close()
    log_id, offset = split_location(loc)
    path = logs.file_of(log_id)
    data = bytearray(path.read_bytes())
    data[offset + ENTRY_HEADER_SIZE + 3] ^= 0x40
    path.write_bytes(bytes(data))
    logs.close()
    fresh = EntryLogDirectory(tmp_path)
    with pytest.raises(EntryLogCorruptError, match="CRC"):
        fresh.read_entry(loc, 11, 5, 0)
    with pytest.raises(EntryLogCorruptError):
        fresh.read_entry(loc, 11, 5, 1)  # wrong identity is refused too


def test_removed_log_keeps_working_for_a_reader_that_holds_it(tmp_path: Path) -> None:
    logs = EntryLogDirectory(tmp_path)
    writer = EntryLogWriter(logs, max_bytes=1 << 20)
    [loc] = writer.write([(1, 0, b"abc")])
    writer.close()
    assert logs.read_entry(loc, 3, 1, 0) == b"abc"
    logs.remove_logs([split_location(loc)[0]])
    assert logs.log_ids() == []
    with pytest.raises(FileNotFoundError):
        logs.read_entry(loc, 3, 1, 0)


def test_index_set_replace_and_accounting() -> None:
    index = EntryIndex()
    index.set(1, 10, location_of(1, 100), 50)
    index.set(1, 12, location_of(1, 200), 50)
    index.set(1, 5, location_of(2, 100), 10)  # below base: the arrays grow downwards
    assert index.get(1, 10) == (location_of(1, 100), 50)
    assert index.get(1, 11) is None
    assert index.get(1, 5) == (location_of(2, 100), 10)
    assert index.ledger(1).max_entry_id() == 12  # type: ignore[union-attr]
    assert index.log_usage[1] == {1: 2 * (50 + ENTRY_HEADER_SIZE)}
    index.set(1, 10, location_of(2, 300), 50)  # rewritten elsewhere: bytes move between logs
    assert index.log_usage[1] == {1: 50 + ENTRY_HEADER_SIZE}
    assert not index.compare_and_set(1, 10, location_of(1, 100), location_of(3, 0), 50)
    assert index.compare_and_set(1, 10, location_of(2, 300), location_of(3, 0), 50)
    assert index.entry_count == 3
    index.delete_ledger(1)
    assert index.get(1, 10) is None and index.entry_count == 0
    assert all(not usage for usage in index.log_usage.values())


def test_index_log_round_trip_torn_tail_and_rewrite(tmp_path: Path) -> None:
    index_log = IndexLog(tmp_path)
    index = EntryIndex()
    assert index_log.load(index, {}) is None
    batch = {
        1: [(0, location_of(1, 16), 10), (1, location_of(1, 54), 10)],
        2: [(0, location_of(1, 92), 20)],
    }
    index_log.append(
        [
            encode_index_record(REC_LOCATIONS, index.encode_locations(batch)),
            encode_state_record([(1, LedgerState(fenced=True, lac=0, last_entry_id=1))]),
        ]
    )
    index_log.append([encode_deletes([2])])
    good_size = index_log.size
    index_log.append([encode_deletes([1])])  # this one gets torn below
    index_log.close()
    path = next(tmp_path.glob("*.idx"))
    os.truncate(path, good_size + 5)

    reloaded, states = EntryIndex(), dict[int, LedgerState]()
    index_log = IndexLog(tmp_path)
    assert index_log.load(reloaded, states) == "torn record header"
    assert path.stat().st_size == good_size  # the torn tail was cut away
    assert reloaded.get(1, 1) == (location_of(1, 54), 10)
    assert reloaded.get(2, 0) is None
    assert states[1] == LedgerState(fenced=True, deleted=False, lac=0, last_entry_id=1)

    records = [encode_index_record(REC_LOCATIONS, body) for body in reloaded.snapshot_locations()]
    index_log.rewrite(records + [encode_state_record(list(states.items()))])
    index_log.close()
    assert [p.name for p in tmp_path.glob("*.idx")] == ["00000002.idx"]
    again, states2 = EntryIndex(), dict[int, LedgerState]()
    assert IndexLog(tmp_path).load(again, states2) is None
    assert again.get(1, 0) == (location_of(1, 16), 10) and states2 == states


def test_debris_of_a_failed_write_is_overwritten(tmp_path: Path) -> None:
    """A write that failed half-way leaves bytes behind; the next write must not drift."""
    logs = EntryLogDirectory(tmp_path / "logs")
    writer = EntryLogWriter(logs, max_bytes=1 << 20)
    writer.write([(1, 0, b"first")])
    os.pwrite(writer._fd, b"debris" * 50, writer._size)  # what a failed write leaves
    [loc] = writer.write([(1, 1, b"second")])
    writer.close()
    assert logs.read_entry(loc, 6, 1, 1) == b"second"

    index_log = IndexLog(tmp_path / "index")
    index_log.load(EntryIndex(), {})
    os.pwrite(index_log._fd, b"debris" * 50, index_log.size)
    index_log.append([encode_deletes([42])])
    index_log.close()
    index = EntryIndex()
    index.set(42, 0, location_of(1, 16), 5)
    stop = IndexLog(tmp_path / "index").load(index, {})
    assert stop is not None  # the rest of the debris, behind the good record, is cut away
    assert index.get(42, 0) is None  # the delete record was read back


def _index_log_with_three_appends(directory: Path) -> list[int]:
    index_log = IndexLog(directory)
    index_log.load(EntryIndex(), {})
    ends = []
    for ledger in (1, 2, 3):
        batch = {ledger: [(0, location_of(1, 16), 10)]}
        index_log.append(
            [
                encode_index_record(REC_LOCATIONS, EntryIndex().encode_locations(batch)),
                encode_state_record([(ledger, LedgerState(lac=-1, last_entry_id=0))]),
            ]
        )
        ends.append(index_log.size)
    index_log.close()
    return ends


def test_index_log_zero_filled_tail_is_torn_but_damage_in_the_middle_is_refused(
    tmp_path: Path,
) -> None:
    ends = _index_log_with_three_appends(tmp_path / "zeros")
    path = next((tmp_path / "zeros").glob("*.idx"))
    with path.open("r+b") as f:  # a power loss can leave the last append as zeros
        f.seek(ends[1])
        f.write(bytes(ends[2] - ends[1] + 100))
    index, states = EntryIndex(), dict[int, LedgerState]()
    assert IndexLog(tmp_path / "zeros").load(index, states) == "CRC mismatch"
    assert path.stat().st_size == ends[1]
    assert index.get(2, 0) is not None and index.get(3, 0) is None and set(states) == {1, 2}

    ends = _index_log_with_three_appends(tmp_path / "middle")
    path = next((tmp_path / "middle").glob("*.idx"))
    data = bytearray(path.read_bytes())
    data[ends[0] + 20] ^= 0xFF  # inside the second append, the third is intact
    path.write_bytes(bytes(data))
    with pytest.raises(IndexLogCorruptError, match="CRC mismatch"):
        IndexLog(tmp_path / "middle").load(EntryIndex(), {})
    assert path.stat().st_size == len(data)  # nothing was cut away
