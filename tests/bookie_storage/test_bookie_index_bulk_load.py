"""The index log's bulk rebuild gives exactly the index the per-entry path gives.

Start-up builds each ledger's location arrays in bulk (location_index.LocationBlockLoader);
these tests hold it to the per-entry reference (``EntryIndex.set`` for every row, in log order,
``delete_ledger`` for every delete) on random logs — runs, overlaps, gaps, entries below the
base, rewrites in other entry logs, deletes, torn tails — plus a hand-built file (the on-disk
format is unchanged: an existing data directory still starts) and the cost of the common case.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_backend.bookie.entry_index import (
    REC_DELETES,
    REC_LOCATIONS,
    REC_STATES,
    IndexLog,
    encode_deletes,
    encode_index_record,
    encode_state_record,
    read_index_log_readonly,
)
from ledger_backend.bookie.entry_log import ENTRY_HEADER_SIZE, location_of
from ledger_backend.bookie.ledger_state import LedgerState
from ledger_backend.bookie.location_index import EntryIndex, LedgerEntryIndex
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig

Rows = dict[int, list[tuple[int, int, int]]]
Append = tuple[Rows, list[tuple[int, LedgerState]], list[int]]


def picture(index: EntryIndex) -> tuple[object, ...]:
    """Everything observable about an index, arrays included (logs left empty ignored)."""
    ledgers = {}
    for ledger_id in index.ledger_ids():
        idx = index.ledger(ledger_id)
        assert idx is not None
        ledgers[ledger_id] = (idx.base, idx.locs.tolist(), idx.sizes.tolist(), idx.count)
    usage = {log: dict(u) for log, u in index.log_usage.items() if u}
    return index.entry_count, index.ledger_ids(), ledgers, usage


def reference(appends: list[Append]) -> tuple[EntryIndex, dict[int, LedgerState]]:
    """The per-entry path, applied in log order."""
    index, states = EntryIndex(), dict[int, LedgerState]()
    for rows, changed, deletes in appends:
        for ledger_id, ledger_rows in rows.items():
            for entry_id, location, size in ledger_rows:
                index.set(ledger_id, entry_id, location, size)
        states.update(changed)
        for ledger_id in deletes:
            index.delete_ledger(ledger_id)
    return index, states


def write_log(directory: Path, appends: list[Append]) -> list[int]:
    """Append each checkpoint's records as the engine does; return the size after each."""
    index_log = IndexLog(directory, fsync=False)
    index_log.load(EntryIndex(), {})
    ends = []
    for rows, changed, deletes in appends:
        records = []
        if rows:
            records.append(encode_index_record(REC_LOCATIONS, EntryIndex().encode_locations(rows)))
        if changed:
            records.append(encode_state_record(changed))
        if deletes:
            records.append(encode_deletes(deletes))
        index_log.append(records)
        ends.append(index_log.size)
    index_log.close()
    return ends


@st.composite
def ledger_rows(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    log_id = draw(st.integers(1, 3))
    offset = draw(st.integers(16, 1 << 20))
    if draw(st.booleans()):  # the usual shape: a run of consecutive entries
        first = draw(st.integers(0, 40))
        entries = list(range(first, first + draw(st.integers(1, 25))))
    else:  # anything: out of order, repeated, gaps
        entries = draw(st.lists(st.integers(0, 60), min_size=1, max_size=12))
    rows = []
    for entry_id in entries:
        size = draw(st.integers(0, 300))
        if draw(st.integers(0, 9)) == 0:  # the ledger continues in another entry log
            log_id, offset = log_id + 1, 16
        rows.append((entry_id, location_of(log_id, offset), size))
        offset += ENTRY_HEADER_SIZE + size
    return rows


appends_strategy = st.lists(
    st.tuples(
        st.dictionaries(st.integers(1, 6), ledger_rows(), max_size=4),
        st.lists(
            st.tuples(
                st.integers(1, 6),
                st.builds(LedgerState, st.booleans(), st.booleans(), st.integers(-1, 9)),
            ),
            max_size=3,
        ),
        st.lists(st.integers(1, 6), max_size=2),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(appends=appends_strategy, cut=st.integers(0, 1 << 16))
def test_bulk_load_matches_per_entry_path_with_a_torn_tail(
    tmp_path_factory: pytest.TempPathFactory, appends: list[Append], cut: int
) -> None:
    directory = tmp_path_factory.mktemp("idx")
    ends = write_log(directory, appends)
    [path] = directory.glob("*.idx")
    whole_index, whole_states = reference(appends)

    index, states = EntryIndex(), dict[int, LedgerState]()
    read, stopped_at, problem = read_index_log_readonly(directory, index, states)
    assert (read, stopped_at, problem) == (path, ends[-1], None)
    assert picture(index) == picture(whole_index) and states == whole_states

    # tear the last append somewhere inside it: only the appends before it count
    start_of_last = ends[-2] if len(appends) > 1 else 16  # the file header
    torn_at = start_of_last + cut % max(1, ends[-1] - start_of_last)
    if torn_at > start_of_last:
        os.truncate(path, torn_at)
        kept = appends[:-1]
    else:
        kept = appends
        torn_at = ends[-1]
    expected_index, expected_states = reference(kept)
    index, states = EntryIndex(), dict[int, LedgerState]()
    stop = IndexLog(directory, fsync=False).load(index, states)
    assert (stop is None) == (kept is appends)
    assert picture(index) == picture(expected_index) and states == expected_states
    assert path.stat().st_size == (ends[-1] if kept is appends else start_of_last)


@settings(max_examples=80, deadline=None)
@given(appends=appends_strategy)
def test_snapshot_blocks_are_the_bytes_the_row_encoder_makes(appends: list[Append]) -> None:
    index, _states = reference(appends)
    old_style = []  # snapshot_locations as it was: rows of every ledger, ~170k rows a chunk
    batch: Rows = {}
    for ledger_id in index.ledger_ids():
        idx = index.ledger(ledger_id)
        assert idx is not None
        batch[ledger_id] = list(idx.items())
    if batch:
        old_style.append(index.encode_locations(batch))
    assert list(index.snapshot_locations()) == old_style
    rebuilt = EntryIndex()
    for body in index.snapshot_locations():
        rebuilt.apply_locations(body)
    assert picture(rebuilt) == picture(index)


def test_a_hand_built_log_in_the_existing_format_loads(tmp_path: Path) -> None:
    """Bytes laid out by hand from the format description, not by the encoder."""

    def record(rec_type: int, body: bytes) -> bytes:
        import crc32c

        head_tail = struct.pack("<BBH", 1, rec_type, 0)
        crc = crc32c.crc32c(head_tail + body, crc32c.crc32c(struct.pack("<I", len(body))))
        return struct.pack("<II", len(body), crc) + head_tail + body

    def block(ledger: int, rows: list[tuple[int, int, int]]) -> bytes:
        cols = [struct.pack(f"<{len(rows)}q", *(r[k] for r in rows)) for k in range(3)]
        return struct.pack("<QI", ledger, len(rows)) + b"".join(cols)

    header = struct.pack(">4sHHQ", b"LWIX", 1, 0, 1)
    first = block(5, [(0, location_of(1, 16), 10), (1, location_of(1, 54), 11)])
    first += block(6, [(3, location_of(1, 93), 7)])
    states = struct.pack("<QBqq", 5, 1, 1, 1) + struct.pack("<QBqq", 6, 0, -1, 3)
    batch = record(REC_LOCATIONS, first) + record(REC_STATES, states)
    second = block(5, [(2, location_of(2, 16), 12)])
    data = header + record(4, batch) + record(REC_LOCATIONS, second)
    data += record(REC_DELETES, struct.pack("<q", 6))
    (tmp_path / "00000001.idx").write_bytes(data)

    index, loaded = EntryIndex(), dict[int, LedgerState]()
    assert IndexLog(tmp_path, fsync=False).load(index, loaded) is None
    assert [index.get(5, e) for e in range(4)] == [
        (location_of(1, 16), 10), (location_of(1, 54), 11), (location_of(2, 16), 12), None,
    ]
    assert index.ledger(6) is None and index.entry_count == 3
    assert index.log_usage[1] == {5: 10 + 11 + 2 * ENTRY_HEADER_SIZE}
    assert index.log_usage[2] == {5: 12 + ENTRY_HEADER_SIZE}
    assert loaded[5] == LedgerState(fenced=True, lac=1, last_entry_id=1)
    assert loaded[6] == LedgerState(lac=-1, last_entry_id=3)


def test_loading_the_usual_shape_does_no_per_entry_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints appending the next entries of many ledgers, a deleted ledger among them:
    not one per-entry call, and nothing at all for the deleted ledger."""
    appends: list[Append] = []
    next_offset = 16
    for checkpoint in range(40):
        rows: Rows = {}
        for ledger_id in range(1, 21):
            rows[ledger_id] = []
            for entry_id in range(checkpoint * 50, checkpoint * 50 + 50):
                location = location_of(1 + checkpoint // 10, next_offset)
                rows[ledger_id].append((entry_id, location, 9))
                next_offset += ENTRY_HEADER_SIZE + 9
        appends.append((rows, [(i, LedgerState(lac=checkpoint)) for i in rows], []))
    appends.append(({}, [], [7]))
    write_log(tmp_path, appends)
    expected, expected_states = reference(appends)

    calls = {"set": 0, "entry_set": 0}
    bulk_ledgers: list[int] = []
    real_set, real_entry_set = EntryIndex.set, LedgerEntryIndex.set
    real_set_run = EntryIndex.set_run

    def counting_set(self: EntryIndex, *args: int) -> None:
        calls["set"] += 1
        real_set(self, *args)

    def counting_entry_set(self: LedgerEntryIndex, *args: int) -> tuple[int, int] | None:
        calls["entry_set"] += 1
        return real_entry_set(self, *args)

    def noting_set_run(self: EntryIndex, ledger_id: int, *args: object) -> bool:
        bulk_ledgers.append(ledger_id)
        return real_set_run(self, ledger_id, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(EntryIndex, "set", counting_set)
    monkeypatch.setattr(EntryIndex, "set_run", noting_set_run)
    monkeypatch.setattr(LedgerEntryIndex, "set", counting_entry_set)
    index, states = EntryIndex(), dict[int, LedgerState]()
    assert IndexLog(tmp_path, fsync=False).load(index, states) is None
    assert calls == {"set": 0, "entry_set": 0}
    assert sorted(bulk_ledgers) == [i for i in range(1, 21) if i != 7]  # one call per ledger
    assert index.entry_count == 19 * 40 * 50
    assert picture(index) == picture(expected) and states == expected_states


def test_overwrites_moves_and_holes_take_the_bulk_path_where_they_can(tmp_path: Path) -> None:
    """Replay after a crash re-indexes entries already indexed; compaction moves a log's
    entries elsewhere; out-of-order sets leave holes that later runs fill."""
    appends: list[Append] = [
        ({1: [(0, location_of(1, 16), 5), (1, location_of(1, 49), 5)]}, [], []),
        ({1: [(4, location_of(1, 82), 6)], 2: [(3, location_of(1, 116), 1)]}, [], []),
        ({1: [(1, location_of(2, 16), 5), (2, location_of(2, 49), 5)]}, [], []),  # overlap
        ({1: [(2, location_of(3, 16), 5), (3, location_of(3, 49), 7)]}, [], []),  # fills hole
        ({2: [(0, location_of(3, 84), 2)], 1: [(9, location_of(3, 114), 3)]}, [], []),
        ({1: [(0, location_of(4, 16), 5), (1, location_of(4, 49), 5)]}, [], []),  # compaction
    ]
    write_log(tmp_path, appends)
    expected, _ = reference(appends)
    index = EntryIndex()
    assert IndexLog(tmp_path, fsync=False).load(index, {}) is None
    assert picture(index) == picture(expected)
    assert index.get(1, 3) == (location_of(3, 49), 7) and index.get(1, 5) is None
    assert index.log_usage[1] == {1: 6 + ENTRY_HEADER_SIZE, 2: 1 + ENTRY_HEADER_SIZE}
    assert index.log_usage[4] == {1: 2 * (5 + ENTRY_HEADER_SIZE)}  # moved here


async def test_engine_restart_rebuilds_the_index_in_bulk_and_times_its_phases(
    bookie_config: BookieStorageConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many checkpoints over several ledgers, one of them deleted: after a restart every
    entry reads back, and the load made no per-entry index call."""
    async with open_bookie_storage(bookie_config) as storage:
        for checkpoint in range(6):
            for ledger in (1, 2, 3, 4):
                for entry in range(checkpoint * 10, checkpoint * 10 + 10):
                    await storage.add_entry(ledger, entry, entry - 1, b"%d/%d" % (ledger, entry))
            await storage.checkpoint()
        await storage.delete_ledger(2)
        before = picture(storage.index)
    set_calls = 0
    real_set = EntryIndex.set

    def counting_set(self: EntryIndex, *args: int) -> None:
        nonlocal set_calls
        set_calls += 1
        real_set(self, *args)

    monkeypatch.setattr(EntryIndex, "set", counting_set)
    async with open_bookie_storage(bookie_config) as storage:
        assert set_calls == 0 and storage.replayed_records == 0
        assert picture(storage.index) == before
        assert set(storage.startup_seconds) == {"index_load", "journal_replay", "first_checkpoint"}
        for ledger in (1, 3, 4):
            for entry in range(60):
                assert await storage.read_entry(ledger, entry) == b"%d/%d" % (ledger, entry)
        assert storage.index.ledger(2) is None and storage.index.entry_count == 180
