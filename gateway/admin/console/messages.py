"""The console's message browser: read a few records of one partition and show them.

A search starts at an offset (default: the newest `limit` records), at the first record at or
after a timestamp (the partition's time index, as ListOffsets), or scans for a key.  Reads go
through the partition log's own read path (tail cache, then bookies) in slices of
READ_SLICE_BYTES; a key scan stops after SCAN_BUDGET_BYTES or SCAN_BUDGET_RECORDS and says how
far it got, so one request never walks a whole partition.  Control batches (transaction
markers) are skipped.

Values are shown as text (UTF-8; bytes that are not UTF-8 fall back to hex), JSON (indented
when it parses) or hex, cut at SHOW_BYTES.  A record written over RocketMQ carries its TAGS,
KEYS and properties as headers plus the binary `__rmq` header (protocols/rocketmq/
message_encoding.py); the browser lists those as RocketMQ fields.

This module must never open a partition this broker does not own (the caller checks), change
a partition, or decode more than its budgets allow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from protocols.kafka.errors import KafkaProtocolError
from protocols.kafka.record_batch import decode_records, parse_header
from protocols.rocketmq.message_encoding import META_HEADER, PROPERTY_KEYS, PROPERTY_TAGS

MAX_LIMIT = 200
READ_SLICE_BYTES = 1 << 20
SCAN_BUDGET_BYTES = 64 << 20
SCAN_BUDGET_RECORDS = 200_000
SHOW_BYTES = 4096
FORMATS = ("text", "json", "hex")


@dataclass
class ShownRecord:
    offset: int
    timestamp: int
    key: str | None
    value: str | None
    value_size: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    rocketmq: dict[str, str] | None = None


@dataclass
class BrowseResult:
    records: list[ShownRecord]
    start: int
    log_start: int
    log_end: int
    scanned_to: int  # the first offset not looked at
    budget_exhausted: bool = False
    note: str = ""


def show_bytes(data: bytes | None, fmt: str) -> str | None:
    """`data` as text, JSON or hex (see the module doc); None stays None."""
    if data is None:
        return None
    cut = data[:SHOW_BYTES]
    suffix = f" … ({len(data)} bytes)" if len(data) > SHOW_BYTES else ""
    if fmt == "hex":
        return cut.hex(" ") + suffix
    try:
        text = cut.decode("utf-8")
    except UnicodeDecodeError:
        return "hex: " + cut.hex(" ") + suffix
    if fmt == "json" and not suffix:
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return text + suffix


def _rocketmq_fields(headers: list[tuple[str, bytes | None]]) -> dict[str, str] | None:
    if not any(name == META_HEADER for name, _ in headers):
        return None
    fields: dict[str, str] = {}
    for name, value in headers:
        if name == META_HEADER:
            continue
        text = (value or b"").decode("utf-8", "replace")
        label = {PROPERTY_TAGS: "tags", PROPERTY_KEYS: "keys"}.get(name, name)
        fields[label] = text
    return fields


def _shown(record: Any, fmt: str) -> ShownRecord:
    rocketmq = _rocketmq_fields(record.headers)
    headers = [] if rocketmq is not None else [
        (name, show_bytes(value, fmt) or "") for name, value in record.headers]
    return ShownRecord(record.offset, record.timestamp, show_bytes(record.key, fmt),
                       show_bytes(record.value, fmt),
                       len(record.value) if record.value is not None else 0, headers, rocketmq)


def _take(batches: list[bytes], position: int, key: bytes | None, fmt: str, limit: int,
          out: list[ShownRecord], counts: list[int]) -> int:
    """Add the wanted records of `batches` at or after `position` to `out`; returns the next
    offset to read.  counts = [bytes scanned, records scanned]."""
    for batch in batches:
        header = parse_header(batch)
        counts[0] += len(batch)
        next_position = header.last_offset + 1
        if not header.is_control:
            for record in decode_records(batch):
                if record.offset < position:
                    continue
                counts[1] += 1
                if key is None or record.key == key:
                    out.append(_shown(record, fmt))
                    if len(out) >= limit:
                        return record.offset + 1
        position = max(position, next_position)
    return position


async def browse(plog: Any, *, offset: int | None, timestamp_ms: int | None, key: bytes | None,
                 limit: int, fmt: str) -> BrowseResult:
    """Records of `plog` for the console (see the module doc); arguments already validated."""
    log_start, log_end = plog.log_start_offset, plog.high_watermark
    note = ""
    if timestamp_ms is not None:
        found = await plog.offset_for_timestamp(timestamp_ms)
        start = log_end if found is None else found[0]
        if found is None:
            note = "no record at or after that time"
    elif offset is not None:
        start = offset
    elif key is not None:
        start = log_start
    else:
        start = max(log_start, log_end - limit)
    start = min(max(start, log_start), log_end)
    out: list[ShownRecord] = []
    counts = [0, 0]
    position = start
    exhausted = False
    while position < log_end and len(out) < limit:
        if key is not None and (counts[0] >= SCAN_BUDGET_BYTES
                                or counts[1] >= SCAN_BUDGET_RECORDS):
            exhausted = True
            break
        try:
            batches = await plog.read(position, READ_SLICE_BYTES)
            if not batches:
                break
            position = _take(batches, position, key, fmt, limit, out, counts)
        except KafkaProtocolError as exc:  # trimmed meanwhile, or a batch that will not decode
            note = f"stopped at offset {position}: {exc.message or exc.code.name}"
            break
    return BrowseResult(out, start, log_start, log_end, position, exhausted, note)
