"""Many record batches -> one Arrow record batch, without a Python object per record.

The replay's hot path. `BatchRefs` collects the stored batches (or the parts of them inside a
split's offset range) whose rows go out, in row order; `BatchRefs.to_arrow` decodes them all
in one call to a small C function (bulk_records.c): it walks every record's varints and copies
keys, values and headers straight into Arrow buffers (offsets + one data buffer per column,
validity bitmaps), so a 1 KB record costs a memcpy and a few varint reads, not a bytes object,
a list append and pa.array's conversion. Compressed batches are decompressed per batch first
(protocols/kafka/compression.py).

The C source is compiled once per source version and machine with the system's C compiler
(`cc`, as CI and the images here have) into a per-user cache directory and loaded with ctypes;
no Python headers, no build step at install. Where there is no compiler, where the function
refuses a group of batches (it is strict, see bulk_records.c), or where the data would need
64-bit Arrow offsets, the same rows come from the per-record decoders (batch_columns.py), so
results never depend on the path: tests/spark_bridge/test_spark_bulk_decode.py checks both
against each other on generated batches, compressed ones included.
LEDGERWIRE_BULK_DECODE=0 turns the C path off (for comparisons).

This module must never return a row the per-record path would not, nor in another order.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import pkgutil
import platform
import shlex
import shutil
import subprocess
import tempfile
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from protocols.kafka import compression as codecs
from protocols.kafka.record_batch import HEADER_SIZE, BatchHeader
from spark_bridge.batch_columns import Columns, decode_batch_columns

logger = logging.getLogger("spark_bridge.bulk_decode")

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()),
                                  pa.field("value", pa.binary())]))  # fmt: skip


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Spark's Kafka source schema as Arrow (record_decode.py)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


_MAX_ARROW_BYTES = (1 << 31) - 1  # pa.binary() offsets are int32


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ledgerwire"


_FLAGS = ("-O2", "-shared", "-fPIC")


def _compiler() -> list[str] | None:
    given = os.environ.get("CC")
    if given:
        return shlex.split(given)  # "ccache gcc" as make would take it
    found = shutil.which("cc") or shutil.which("gcc")
    return [found] if found else None


def _compile(source: bytes) -> Path | None:
    """The shared library for `source`, compiled once per source, flags and machine (a
    temporary file per compile, renamed into the cache: concurrent compiles by several
    workers each rename a whole library); None where no C compiler works. OSError where the
    cache cannot be written (a read-only home): the caller falls back."""
    key = b"\0".join([source, platform.machine().encode(), *(f.encode() for f in _FLAGS)])
    folder = _cache_dir()
    target = folder / f"bulk_records-{hashlib.sha256(key).hexdigest()[:16]}.so"
    if target.exists():
        return target
    compiler = _compiler()
    if compiler is None:
        logger.warning("no C compiler (cc) found: the bulk record decoder is off, using the "
                       "per-record one")
        return None
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src = Path(tmp) / "bulk_records.c"
        src.write_bytes(source)
        out = Path(tmp) / "bulk_records.so"
        done = subprocess.run([*compiler, *_FLAGS, "-o", str(out), str(src)],
                              capture_output=True, timeout=120, check=False)  # fmt: skip
        if done.returncode != 0:
            logger.warning("bulk record decoder not compiled (%s), using the per-record one",
                           done.stderr.decode(errors="replace").strip()[:200])  # fmt: skip
            return None
        os.replace(out, target)
    return target


def _load() -> Any:
    if os.environ.get("LEDGERWIRE_BULK_DECODE", "1") == "0":
        return None
    try:
        source = pkgutil.get_data("spark_bridge", "bulk_records.c")
        path = _compile(source) if source else None
        if path is None:
            return None
        lib = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("bulk record decoder unavailable (%s), using the per-record one", exc)
        return None
    fn = lib.lw_decode_sections
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 17
    return fn


_decode_sections: Any = _load()


def available() -> bool:
    return _decode_sections is not None


@dataclass
class BatchRefs:
    """Stored batches whose rows in [start, end) go out, in order (decoded later, in bulk)."""

    want_headers: bool
    batches: list[tuple[bytes, BatchHeader, int, int]] = field(default_factory=list)
    records: int = 0  # records in those batches (an upper bound of the rows)

    def __len__(self) -> int:
        return self.records

    def add(self, payload: bytes, header: BatchHeader, start: int, end: int) -> None:
        self.batches.append((payload, header, start, end))
        self.records += header.records_count

    def extend(self, other: BatchRefs) -> None:
        self.batches.extend(other.batches)
        self.records += other.records

    def to_columns(self) -> Columns:
        """The per-record decoders' answer for the same batches."""
        out = Columns(self.want_headers)
        for payload, header, start, end in self.batches:
            decode_batch_columns(payload, header, start, end, out)
        return out

    def decode_bulk(self, topic: str, partition: int) -> pa.RecordBatch | None:
        """All rows as one Arrow batch from the C decoder; None if it is not there or refused
        (then `to_columns` gives the rows)."""
        if _decode_sections is None:
            return None
        sections = array("q")
        keep: list[Any] = []  # the buffers the sections point into, alive through the call
        total = max_rows = 0
        for payload, header, start, end in self.batches:
            if header.size > len(payload) or header.size < HEADER_SIZE:
                return None
            if header.compression == codecs.NONE:
                buf = pa.py_buffer(payload)
                address, size = buf.address + HEADER_SIZE, header.size - HEADER_SIZE
            else:
                try:
                    body = codecs.decompress(header.compression,
                                             memoryview(payload)[HEADER_SIZE : header.size])
                except Exception:  # noqa: BLE001 - the per-record path raises what it always did
                    return None
                buf = pa.py_buffer(body)
                address, size = buf.address, len(body)
            if not 0 <= header.records_count <= size:  # a record takes at least a byte
                return None
            keep.append(buf)
            sections.extend((address, size, header.base_offset, header.base_timestamp,
                             header.max_timestamp, 1 if header.timestamp_type == 1 else 0,
                             header.records_count, start, end, header.timestamp_type))
            total += size
            max_rows += header.records_count
        if total > _MAX_ARROW_BYTES or max_rows > _MAX_ARROW_BYTES:
            return None
        return _decode(sections, len(self.batches), total, max_rows, self.want_headers,
                       topic, partition)  # fmt: skip


def _decode(sections: array, nsec: int, total: int, max_rows: int, want_headers: bool,
            topic: str, partition: int) -> pa.RecordBatch | None:  # fmt: skip
    offsets = pa.allocate_buffer(8 * max_rows)
    ts_us = pa.allocate_buffer(8 * max_rows)
    ts_types = pa.allocate_buffer(4 * max_rows)
    key_off, val_off = pa.allocate_buffer(4 * max_rows + 4), pa.allocate_buffer(4 * max_rows + 4)
    bitmap_bytes = (max_rows + 7) // 8
    key_valid, val_valid = bytearray(bitmap_bytes), bytearray(bitmap_bytes)
    key_data, val_data = pa.allocate_buffer(total), pa.allocate_buffer(total)
    max_headers = total // 2
    if want_headers:
        hlist_off = pa.allocate_buffer(4 * max_rows + 4)
        hkey_off, hval_off = (pa.allocate_buffer(4 * max_headers + 4),
                              pa.allocate_buffer(4 * max_headers + 4))  # fmt: skip
        hkey_data, hval_data = pa.allocate_buffer(total), pa.allocate_buffer(total)
        hval_valid = bytearray((max_headers + 7) // 8)
        hargs = [hlist_off.address, hkey_off.address, hkey_data.address, hval_off.address,
                 _address(hval_valid), hval_data.address]  # fmt: skip
    else:
        hargs = [None] * 6
    counts = array("q", [0] * 5)
    rows = _decode_sections(
        nsec, sections.buffer_info()[0], offsets.address, ts_us.address, ts_types.address,
        key_off.address, _address(key_valid), key_data.address,
        val_off.address, _address(val_valid), val_data.address, *hargs, counts.buffer_info()[0])
    if rows < 0:
        return None
    n, key_nulls, val_nulls, nheaders, hval_nulls = counts
    keys = _binary(pa.binary(), n, key_valid, key_nulls, key_off, key_data)
    values = _binary(pa.binary(), n, val_valid, val_nulls, val_off, val_data)
    arrays = [
        keys, values,
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, offsets]),
        pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, ts_us]),
        pa.Array.from_buffers(pa.int32(), n, [None, ts_types]),
    ]
    if want_headers:
        hkeys = _binary(pa.string(), nheaders, None, 0, hkey_off, hkey_data)
        try:
            hkeys.validate(full=True)  # UTF-8: the per-record path replaces bad bytes
        except pa.ArrowInvalid:
            return None
        hvals = _binary(pa.binary(), nheaders, hval_valid, hval_nulls, hval_off, hval_data)
        entries = pa.StructArray.from_arrays([hkeys, hvals], fields=list(HEADER_TYPE.value_type))
        lists = pa.ListArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1, [None, hlist_off]), entries)
        arrays.append(lists.cast(HEADER_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(want_headers))


def _address(buf: bytearray) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buf)) if buf else 0


def _binary(kind: pa.DataType, n: int, valid: bytearray | None, nulls: int,
            offsets: pa.Buffer, data: pa.Buffer) -> pa.Array:  # fmt: skip
    used = int.from_bytes(offsets.slice(4 * n, 4).to_pybytes(), "little") if n else 0
    bitmap = pa.py_buffer(valid) if nulls else None
    return pa.Array.from_buffers(kind, n, [bitmap, offsets.slice(0, 4 * n + 4),
                                           data.slice(0, used)], null_count=nulls)  # fmt: skip


__all__ = ["HEADER_TYPE", "BatchRefs", "arrow_schema", "available"]
