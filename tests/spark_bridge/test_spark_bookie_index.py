"""The bridge reads a bookie's index log through entry_index's public read-only reader.

Index files are written by the engine's own IndexLog; a torn tail (an append the bookie never
finished) must be where reading stops, and the file must be left exactly as it was: a starting
bookie cuts that tail, an offline reader never does.  No Spark here.
"""

from __future__ import annotations

from pathlib import Path

from ledger_backend.bookie.entry_index import (
    REC_DELETES,
    REC_LOCATIONS,
    EntryIndex,
    IndexLog,
    encode_index_record,
    encode_state_record,
    read_index_log_readonly,
)
from ledger_backend.bookie.ledger_state import LedgerState
from spark_bridge.bookie_files import BookieDirectory


def write_index(index_dir: Path) -> Path:
    log = IndexLog(index_dir, fsync=False)
    log.load(EntryIndex(), {})
    rows = EntryIndex()
    locations = rows.encode_locations({
        7: [(0, (1 << 32) | 100, 10), (1, (1 << 32) | 130, 12)],
        9: [(0, (1 << 32) | 160, 5)],
    })
    log.append([encode_index_record(REC_LOCATIONS, locations),
                encode_state_record([(7, LedgerState(lac=1, last_entry_id=1)),
                                     (9, LedgerState(lac=0, last_entry_id=0))])])
    log.append([encode_index_record(REC_DELETES, (9).to_bytes(8, "little"))])
    log.close()
    [path] = index_dir.glob("*.idx")
    return path


def test_read_only_reader_applies_records_and_stops_at_a_torn_tail(tmp_path: Path) -> None:
    index_dir = tmp_path / "ledgers" / "index"
    path = write_index(index_dir)
    clean_size = path.stat().st_size
    torn = encode_index_record(REC_LOCATIONS, EntryIndex().encode_locations({8: [(0, 1, 1)]}))
    path.write_bytes(path.read_bytes() + torn[: len(torn) - 3])  # the last append was torn
    (index_dir / "00000099.tmp").write_bytes(b"a rewrite that died")

    index = EntryIndex()
    states: dict[int, LedgerState] = {}
    read, stopped_at, problem = read_index_log_readonly(index_dir, index, states)
    assert (read, stopped_at, problem) == (path, clean_size, "torn record")
    assert index.get(7, 1) == ((1 << 32) | 130, 12)
    assert index.ledger(9) is None and index.ledger(8) is None
    assert states[7].lac == 1
    # nothing was cut or cleaned up
    assert path.stat().st_size == clean_size + len(torn) - 3
    assert (index_dir / "00000099.tmp").exists()

    directory = BookieDirectory(tmp_path)
    assert directory.has_ledger(7) and directory.last_add_confirmed(7) == 1
    assert not directory.has_ledger(8)
    assert path.stat().st_size == clean_size + len(torn) - 3


def test_no_index_generation_reads_nothing(tmp_path: Path) -> None:
    index = EntryIndex()
    assert read_index_log_readonly(tmp_path / "absent", index, {}) == (None, 0, None)
    assert not (tmp_path / "absent").exists()
