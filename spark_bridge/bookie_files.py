"""Read entries straight from a stopped bookie's data directory (replay with the broker down).

In `ledgerwire standalone` the bookies run inside the broker process, so when that process is
stopped there is no bookie to ask. The entries are still on disk under
<data_dir>/bookies/<i>/, in the bookie storage engine's files (ledger_backend/bookie/storage.py):

  ledgers/index/<generation>.idx   entry locations and per-ledger states up to the last checkpoint
  ledgers/entrylogs/<id>.log       the entries themselves (each record length- and CRC-checked)
  ledgers/checkpoint.mark          where in the journal the last checkpoint ended
  journal/<id>.jnl                 every add, fence and delete; those after the mark are not in
                                   the index yet (a broker killed with SIGKILL leaves some)

`BookieDirectory` loads the newest index generation and scans the journal from the mark, the
same two steps a starting bookie takes, but it only reads: it never truncates a torn index
tail, never removes old generations or temporary files, never checkpoints and never replays
into an engine. What it stops at (a torn record) it ignores, as a bookie would. Entries are then
read with `pread` and checked twice: the entry-log (or journal) record CRC, and the ledger
client's digest (ledger_backend/client/entry_format.py).

Opening the files while a bookie process is using them is NOT safe (compaction moves entries,
GC deletes logs): callers use this only after checking that the bookies do not answer.
This module must never write, rename or delete anything under a bookie directory.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ledger_backend.bookie.checkpoint_mark import MARK_FILE_NAME, read_mark
from ledger_backend.bookie.entry_index import (  # the format's one definition
    EntryIndex,
    read_index_log_readonly,
)
from ledger_backend.bookie.entry_log import (
    ENTRY_HEADER_SIZE,
    ENTRY_LOG_MAGIC,
    ENTRY_LOG_VERSION,
    EntryLogCorruptError,
    decode_entry,
    split_location,
)
from ledger_backend.bookie.file_format import (
    FILE_HEADER_SIZE,
    BadFileError,
    check_file_header,
)
from ledger_backend.bookie.journal_format import (
    JOURNAL_FILE_VERSION,
    JOURNAL_MAGIC,
    TYPE_ADD,
    TYPE_DELETE,
    LogMark,
    journal_file_name,
)
from ledger_backend.bookie.journal_scanner import JournalScanner
from ledger_backend.bookie.ledger_state import LedgerState
from ledger_backend.client.entry_format import decode_entry as decode_client_entry
from ledger_backend.client.errors import LedgerError, NoSuchEntryError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _JournalLocation:
    file_id: int
    offset: int
    length: int


class BookieDirectory:
    """One bookie data directory, read-only. Blocking: call from a plain thread."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir)
        self._ledgers_dir = self.path / "ledgers"
        self._journal_dir = self.path / "journal"
        if not self._ledgers_dir.is_dir() and not self._journal_dir.is_dir():
            raise FileNotFoundError(f"{self.path} is not a bookie data directory")
        self._index = EntryIndex()
        self._lac: dict[int, int] = {}
        self._deleted: set[int] = set()
        self._journal: dict[tuple[int, int], _JournalLocation] = {}
        self._fds: dict[Path, int] = {}
        self._load_index()
        self._scan_journal()

    # ---- loading --------------------------------------------------------------------------

    def _load_index(self) -> None:
        """Apply the newest index generation's records (the bookie engine's own reader,
        entry_index.read_index_log_readonly), stopping at a torn tail exactly where a starting
        bookie would cut it, but without cutting anything."""
        states: dict[int, LedgerState] = {}
        path, stopped_at, problem = read_index_log_readonly(
            self._ledgers_dir / "index", self._index, states)
        if problem is not None:
            log.info("%s: index ends at offset %d (%s)", path, stopped_at, problem)
        for ledger_id, state in states.items():
            if state.deleted:
                self._deleted.add(ledger_id)
            self._lac[ledger_id] = max(self._lac.get(ledger_id, -1), state.lac)

    def _scan_journal(self) -> None:
        if not self._journal_dir.is_dir():
            return
        try:
            mark = read_mark(self._ledgers_dir / MARK_FILE_NAME) or LogMark(0, 0)
        except BadFileError as exc:
            log.warning("%s: checkpoint mark unreadable (%s): scanning every journal file",
                        self.path, exc)  # fmt: skip
            mark = LogMark(0, 0)
        scanner = JournalScanner(self._journal_dir, mark)
        try:
            while batch := scanner.next_batch():
                for record, after in batch:
                    if record.type == TYPE_ADD:
                        key = (record.ledger_id, record.entry_id)
                        length = len(record.payload)
                        self._journal[key] = _JournalLocation(after.file_id,
                                                              after.offset - length, length)
                        self._lac[record.ledger_id] = max(self._lac.get(record.ledger_id, -1),
                                                          record.lac)  # fmt: skip
                    elif record.type == TYPE_DELETE:
                        self._deleted.add(record.ledger_id)
        finally:
            scanner.close()

    # ---- reading --------------------------------------------------------------------------

    def has_ledger(self, ledger_id: int) -> bool:
        if ledger_id in self._deleted:
            return False
        return self._index.ledger(ledger_id) is not None or ledger_id in self._lac

    def last_add_confirmed(self, ledger_id: int) -> int:
        """The highest LAC any add to this ledger carried here (-1 if none)."""
        return -1 if ledger_id in self._deleted else self._lac.get(ledger_id, -1)

    def _fd(self, path: Path, magic: bytes, version: int) -> int:
        fd = self._fds.get(path)
        if fd is None:
            fd = os.open(path, os.O_RDONLY)
            try:
                check_file_header(os.pread(fd, FILE_HEADER_SIZE, 0), magic, version)
            except BadFileError:
                os.close(fd)
                raise
            self._fds[path] = fd
        return fd

    def read_stored(self, ledger_id: int, entry_id: int) -> bytes:
        """The stored form of one entry (as the ledger client wrote it); NoSuchEntryError."""
        if ledger_id in self._deleted:
            raise NoSuchEntryError(f"ledger {ledger_id} was deleted on {self.path}")
        found = self._index.get(ledger_id, entry_id)
        if found is not None:
            location, size = found
            log_id, offset = split_location(location)
            path = self._ledgers_dir / "entrylogs" / f"{log_id:08x}.log"
            fd = self._fd(path, ENTRY_LOG_MAGIC, ENTRY_LOG_VERSION)
            raw = os.pread(fd, ENTRY_HEADER_SIZE + size, offset)
            return decode_entry(memoryview(raw), ledger_id, entry_id)
        where = self._journal.get((ledger_id, entry_id))
        if where is None:
            raise NoSuchEntryError(f"no entry {ledger_id}/{entry_id} in {self.path}")
        fd = self._fd(self._journal_dir / journal_file_name(where.file_id), JOURNAL_MAGIC,
                      JOURNAL_FILE_VERSION)  # fmt: skip
        return os.pread(fd, where.length, where.offset)  # the scanner checked its CRC

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class BookieFiles:
    """Every bookie directory of a standalone: an entry is read from the first that has a
    copy passing both checks (with replication several do)."""

    def __init__(self, dirs: list[str] | tuple[str, ...]) -> None:
        if not dirs:
            raise FileNotFoundError("no bookie data directories to read from")
        self.dirs = [BookieDirectory(d) for d in dirs]

    def last_add_confirmed(self, ledger_id: int) -> int:
        return max(d.last_add_confirmed(ledger_id) for d in self.dirs)

    def copies(self, ledger_id: int, entry_id: int) -> int:
        """How many directories hold a valid copy of the entry."""
        count = 0
        for directory in self.dirs:
            if not directory.has_ledger(ledger_id):
                continue
            try:
                stored = directory.read_stored(ledger_id, entry_id)
                decode_client_entry(stored, ledger_id=ledger_id, entry_id=entry_id)
                count += 1
            except (LedgerError, EntryLogCorruptError, BadFileError, OSError):
                continue
        return count

    def read(self, ledger_id: int, entry_id: int) -> bytes:
        errors: list[str] = []
        for directory in self.dirs:
            if not directory.has_ledger(ledger_id):
                continue
            try:
                stored = directory.read_stored(ledger_id, entry_id)
                return decode_client_entry(stored, ledger_id=ledger_id,
                                           entry_id=entry_id).payload  # fmt: skip
            except (LedgerError, EntryLogCorruptError, BadFileError, OSError) as exc:
                errors.append(f"{directory.path}: {exc}")
        raise NoSuchEntryError(
            f"ledger {ledger_id} entry {entry_id} is in no bookie directory"
            + (f" ({'; '.join(errors)})" if errors else "")
        )

    def close(self) -> None:
        for d in self.dirs:
            d.close()
