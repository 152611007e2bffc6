"""Timestamp lookups of a partition log (ListOffsets by timestamp and MAX_TIMESTAMP).

Batch max timestamps are not ordered across batches, so, like Kafka without its time index,
the search walks batch headers in offset order: the first batch whose maxTimestamp >= the target
holds the answer, and only that one batch is decoded to find the exact record.  Ledgers other
than the newest are closed, so their highest timestamp is remembered after one walk and later
searches skip ledgers that cannot match.  The partition's highest timestamp is found by one walk
at the first question and then kept up to date on every append.

This is a cold path (ListOffsets); it never runs on produce or fetch, and it never writes.
The search keeps only what it learned; the log it searches is passed to each question, so the
log and its search hold no reference cycle (a closed log is freed at once, not left to the
cycle collector).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from gateway.topics.stored_log import StoredLog
from ledger_backend.managed_ledger.types import Entry, Position
from protocols.kafka.errors import KafkaProtocolError
from protocols.kafka.record_batch import BatchHeader, decode_records, parse_header


class TimestampSearch:
    def __init__(self) -> None:
        self._ledger_max_ts: dict[int, int] = {}
        # (max timestamp, base offset of its batch) of batches appended in this session
        self._session_max: tuple[int, int] | None = None
        self._scanned_max: tuple[int, int] | None = None
        self._scanned = False

    def on_append(self, header: BatchHeader, base_offset: int) -> None:
        if self._session_max is None or header.max_timestamp > self._session_max[0]:
            self._session_max = (header.max_timestamp, base_offset)

    def truncate_before(self, offset: int) -> None:
        self._scanned = False
        self._scanned_max = None
        if self._session_max is not None and self._session_max[1] < offset:
            self._session_max = None

    @staticmethod
    async def _entries(plog: StoredLog, start_offset: int,
                       end_offset: int) -> AsyncIterator[Entry]:
        ml = plog.ledger
        if start_offset >= end_offset:
            return
        position = await plog.locate(start_offset)
        while position is not None:
            entries = await ml.read(position, plog.config.replay_chunk_entries)
            if not entries:
                return
            for entry in entries:
                if parse_header(entry.data).base_offset >= end_offset:
                    return
                yield entry
            position = ml.next_position(entries[-1].position)

    async def offset_for_timestamp(self, plog: StoredLog,
                                   ts_ms: int) -> tuple[int, int] | None:
        ml = plog.ledger
        start, end = plog.log_start_offset, plog.high_watermark
        if start >= end:
            return None
        infos = [info for info in ml.ledgers if info.entries > 0]
        order = {info.ledger_id: i for i, info in enumerate(infos)}
        closed = {info.ledger_id for info in ml.ledgers[:-1]}
        position = await plog.locate(start)
        running_max = -1
        whole_ledger = position is not None and position.entry_id == 0
        while position is not None and position.ledger_id in order:
            i = order[position.ledger_id]
            info = infos[i]
            known = self._ledger_max_ts.get(info.ledger_id)
            if known is None or known >= ts_ms:
                count = min(plog.config.replay_chunk_entries, info.entries - position.entry_id)
                entries = await ml.read(position, max(1, count)) if count > 0 else []
                for entry in entries:
                    if entry.position.ledger_id != info.ledger_id:
                        break
                    header = parse_header(entry.data)
                    if header.base_offset >= end:
                        return None
                    running_max = max(running_max, header.max_timestamp)
                    if header.max_timestamp >= ts_ms and header.last_offset >= start:
                        return self._first_record_at(entry.data, header, ts_ms, start)
                if entries and entries[-1].position.entry_id < info.entries - 1:
                    position = ml.next_position(entries[-1].position)
                    continue
                if whole_ledger and info.ledger_id in closed:
                    self._ledger_max_ts[info.ledger_id] = running_max
            running_max = -1
            whole_ledger = True
            position = Position(infos[i + 1].ledger_id, 0) if i + 1 < len(infos) else None
        return None

    @staticmethod
    def _first_record_at(
        data: bytes, header: BatchHeader, ts_ms: int, start: int
    ) -> tuple[int, int]:
        try:
            for record in decode_records(data):
                if record.timestamp >= ts_ms and record.offset >= start:
                    return record.offset, record.timestamp
        except KafkaProtocolError:
            pass
        return max(header.base_offset, start), header.max_timestamp

    async def max_timestamp_offset(self, plog: StoredLog) -> tuple[int, int] | None:
        if not self._scanned:
            scan_end = plog.high_watermark
            best: tuple[int, int] | None = None
            async for entry in self._entries(plog, plog.log_start_offset, scan_end):
                header = parse_header(entry.data)
                if best is None or header.max_timestamp > best[0]:
                    best = (header.max_timestamp, header.base_offset)
            self._scanned_max = best
            self._scanned = True
        candidates = [c for c in (self._scanned_max, self._session_max) if c is not None]
        if not candidates:
            return None
        # Highest timestamp; on a tie the earlier offset (sort key: ts desc, offset asc).
        ts, base = min(candidates, key=lambda c: (-c[0], c[1]))
        try:
            position = await plog.locate(base)
            if position is not None:
                data = await plog.ledger.read_entry(position)
                for record in decode_records(data):
                    if record.timestamp == ts and record.offset >= plog.log_start_offset:
                        return record.offset, ts
        except KafkaProtocolError:
            pass
        return max(base, plog.log_start_offset), ts
