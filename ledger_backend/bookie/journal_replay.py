"""Start-up replay of the journal into a storage engine, from the persisted log mark.

Each record after the mark is applied as it was when first journaled: ADD puts the entry into
the write cache (unless the ledger is deleted here), FENCE fences, DELETE deletes.  Replay is
idempotent, so records the index already holds are simply written again.  When the write cache
fills up, a checkpoint with the replay position as its mark makes room.  Replay stops at the
first torn or bad record (see JournalScanner) and logs the file, offset and reason; a bad record
that is not the tail of the newest journal file refuses the start (JournalCorruptError).

This module must never apply a record the scanner did not verify, and never journal anything.
"""

from __future__ import annotations

import logging

import trio

from .journal_format import TYPE_ADD, TYPE_DELETE, TYPE_FENCE, LogMark, list_journal_files
from .journal_scanner import JournalScanner
from .storage_api import BookieError
from .storage_parts import ReplayTarget

log = logging.getLogger("ledger_backend.bookie.storage")


class JournalCorruptError(BookieError):
    """A bad record with journal files after it: damage, not a torn tail. The bookie must not
    start (and must not trim the journal) until someone has looked."""


async def replay_journal(storage: ReplayTarget, mark: LogMark) -> None:
    scanner = JournalScanner(storage.journal_dir, mark)
    try:
        while batch := await trio.to_thread.run_sync(scanner.next_batch):
            for record, position in batch:
                storage.replayed_records += 1
                if record.type == TYPE_ADD:
                    state = storage.states.get(record.ledger_id)
                    if state is None or not state.deleted:
                        storage.apply_add(
                            record.ledger_id, record.entry_id, record.lac, record.payload
                        )
                elif record.type == TYPE_FENCE:
                    storage.apply_fence(record.ledger_id)
                elif record.type == TYPE_DELETE:
                    storage.apply_delete(record.ledger_id)
                if storage.write_cache.is_full():
                    async with storage.checkpoint_lock:
                        await storage.checkpoint_locked(position)
    finally:
        scanner.close()
    storage.replay_stop = stop = scanner.stop
    assert stop is not None
    where = f"journal file {stop.file_id:016x} offset {stop.offset}"
    count = storage.replayed_records
    if stop.clean:
        log.info("journal replay from %s: %d records, ended cleanly at %s", mark, count, where)
        return
    later = [f for f in list_journal_files(storage.journal_dir) if f > stop.file_id]
    if later:
        # A torn write can only be the tail of the newest file (a rollover fsyncs the old file
        # at a record boundary first). A bad record with journal files after it is damage, and
        # those files may hold acknowledged entries: refuse to start and keep every file.
        raise JournalCorruptError(
            f"journal damaged at {where} ({stop.reason}) with {len(later)} later journal "
            f"file(s) not replayed; refusing to start so nothing acknowledged is dropped — "
            f"inspect {storage.journal_dir}"
        )
    log.warning(
        "journal replay from %s: %d records, stopped at %s: %s (torn tail of the newest "
        "journal file: never acknowledged)", mark, count, where, stop.reason
    )
