"""Reading a managed ledger's log by position: across ledger boundaries, never past the end.

Log order is the order of the ledger list (ledgers' ORDER KEYS, see metadata_format.py; a
rewritten ledger's id is newer than its neighbours'), never the raw ledger id. A position one
past a ledger's last entry moves on to the next ledger. A position in a ledger that is no
longer listed is handed to `relocate` (the managed ledger knows where a rewrite moved it, or
which listed ledger follows it); a position before the first listed ledger was trimmed
(InvalidPositionError). Only acknowledged entries are listed in the records this
reader sees, so it can never return an unconfirmed entry. Entries come from the tail cache
when it has them, otherwise from the bookies -- or, for a ledger whose record says it was
offloaded, from its object in tiered storage (falling back to the bookies only while they
still hold the ledger). This module never writes anything.
"""

from __future__ import annotations

from collections.abc import Callable

from ledger_backend.client.errors import NoSuchLedgerError
from ledger_backend.managed_ledger.entry_reader import LedgerReaders
from ledger_backend.managed_ledger.metadata_format import LedgerRecord
from ledger_backend.managed_ledger.tail_cache import TailCache
from ledger_backend.managed_ledger.types import Entry, InvalidPositionError, Position
from ledger_backend.offload.object_reader import OffloadedReader, OffloadLocation
from ledger_backend.offload.offloader import OffloadedReadError

_MAX_READ_BATCH = 256

Relocate = Callable[[Position], "Position | None"]


class LogReader:
    def __init__(
        self,
        name: str,
        records: Callable[[], list[LedgerRecord]],
        cache: TailCache,
        readers: LedgerReaders,
        relocate: Relocate | None = None,
        offloaded: OffloadedReader | None = None,
    ) -> None:
        self.name = name
        self._records = records
        self._cache = cache
        self._readers = readers
        self._relocate = relocate or self._next_by_order
        self._offloaded = offloaded or OffloadedReader({})

    def _record_index(self, ledger_id: int) -> int | None:
        for index, record in enumerate(self._records()):
            if record.ledger_id == ledger_id:
                return index
        return None

    def _next_by_order(self, position: Position) -> Position | None:
        """Default for an unlisted ledger: the first listed ledger ordered after its id."""
        records = self._records()
        if records and position.ledger_id < records[0].order_key:
            raise InvalidPositionError(
                f"{self.name!r}: position {position} was trimmed (first ledger is "
                f"{records[0].ledger_id})"
            )
        for record in records:
            if record.order_key > position.ledger_id:
                return Position(record.ledger_id, 0)
        return None

    def next_position(self, position: Position) -> Position | None:
        """Position of the entry after `position` (which may not exist yet when `position` is
        in the last ledger); None if `position` lies beyond every ledger."""
        records = self._records()
        index = self._record_index(position.ledger_id)
        if index is None:
            try:
                return self._relocate(Position(position.ledger_id, position.entry_id + 1))
            except InvalidPositionError:
                return Position(records[0].ledger_id, 0) if records else None
        record = records[index]
        if position.entry_id + 1 < record.entries or index == len(records) - 1:
            return Position(record.ledger_id, position.entry_id + 1)
        return Position(records[index + 1].ledger_id, 0)

    def _start_of(self, start: Position) -> Position | None:
        if start.entry_id < 0:
            raise InvalidPositionError(f"bad position {start}")
        if self._record_index(start.ledger_id) is not None:
            return start
        return self._relocate(start)

    async def read(
        self, start: Position, max_entries: int, max_bytes: int | None = None
    ) -> list[Entry]:
        """Up to max_entries entries from `start` on, crossing ledgers, never past
        last_confirmed; [] at the end. With max_bytes, stops before the entry that would
        exceed it, but always returns at least one entry if there is one."""
        result: list[Entry] = []
        total = 0
        position = self._start_of(Position(int(start[0]), int(start[1])))
        while position is not None and len(result) < max_entries:
            index = self._record_index(position.ledger_id)
            if index is None:
                raise InvalidPositionError(f"{self.name!r}: ledger of {position} was trimmed")
            record = self._records()[index]
            if position.entry_id >= record.entries:
                if index + 1 >= len(self._records()):
                    break
                position = Position(self._records()[index + 1].ledger_id, 0)
                continue
            count = min(
                max_entries - len(result), record.entries - position.entry_id, _MAX_READ_BATCH
            )
            if max_bytes is not None and record.entries > 0:
                average = max(1, record.size // record.entries)
                count = max(1, min(count, (max_bytes - total) // average + 1))
            datas = await self._read_range(record, position.entry_id, count)
            for offset, data in enumerate(datas):
                if max_bytes is not None and result and total + len(data) > max_bytes:
                    return result
                result.append(Entry(Position(record.ledger_id, position.entry_id + offset), data))
                total += len(data)
            position = Position(record.ledger_id, position.entry_id + len(datas))
        return result

    async def _read_range(self, record: LedgerRecord, first: int, count: int) -> list[bytes]:
        ledger_id = record.ledger_id
        offload = record.offload
        if offload is not None:
            where = OffloadLocation(offload.driver, offload.key, offload.size, offload.location)
            try:
                return await self._offloaded.read(where, ledger_id, first, first + count - 1)
            except OffloadedReadError:
                if offload.bookie_deleted:
                    raise
                # the bookies still hold it: serve from there (the object was logged as bad)
        out: list[bytes] = []
        entry_id = first
        last = first + count - 1
        while entry_id <= last:
            cached = self._cache.get(Position(ledger_id, entry_id))
            if cached is not None:
                out.append(cached)
                entry_id += 1
                continue
            run_end = entry_id
            while run_end < last and Position(ledger_id, run_end + 1) not in self._cache:
                run_end += 1
            try:
                out.extend(await self._readers.read(ledger_id, entry_id, run_end))
            except NoSuchLedgerError as exc:
                raise InvalidPositionError(
                    f"{self.name!r}: ledger {ledger_id} is gone (trimmed?)"
                ) from exc
            entry_id = run_end + 1
        return out

    async def read_entry(self, position: Position) -> bytes:
        entries = await self.read(position, 1)
        if not entries or entries[0].position != position:
            raise InvalidPositionError(f"{self.name!r}: no entry at {position}")
        return entries[0].data
