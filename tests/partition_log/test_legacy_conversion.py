"""Magic v0/v1 message sets become exactly one v2 batch whose records are the set's messages.

Sets are generated from the documented legacy layout (plain messages and compressed wrappers of
every legacy codec, v1 CreateTime and LogAppendTime wrappers) and the converted batch is read
back both by our decoder and by kafka-python's, which shares no code with the converter.
"""

from __future__ import annotations

import struct
import warnings
import zlib
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():
    # kafka-python 3 calls importlib.resources.read_text at import (a DeprecationWarning).
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

from protocols.kafka import compression as codecs
from protocols.kafka import legacy_message_set as legacy
from protocols.kafka import record_batch as rb
from protocols.kafka.errors import InvalidRecordError

CONVERSION = settings(max_examples=150, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])
LOG_APPEND_TIME_BIT = 0x08


def legacy_entry(magic: int, attributes: int, key: bytes | None, value: bytes | None,
                 timestamp: int = -1, offset: int = 0) -> bytes:
    """One legacy log entry (offset, size, crc, magic, attributes, [timestamp], key, value)."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for blob in (key, value):
        body += struct.pack(">i", -1) if blob is None else struct.pack(">i", len(blob)) + blob
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


@dataclass(frozen=True)
class Plain:
    key: bytes | None
    value: bytes | None
    timestamp: int


@dataclass(frozen=True)
class Wrapper:
    codec: int
    timestamp: int
    log_append_time: bool
    inner: tuple[Plain, ...]


blobs = st.none() | st.binary(max_size=40)
timestamps = st.just(-1) | st.integers(min_value=0, max_value=1 << 42)
plains = st.builds(Plain, blobs, blobs, timestamps)
wrappers = st.builds(
    Wrapper, st.sampled_from([codecs.GZIP, codecs.SNAPPY, codecs.LZ4]), timestamps, st.booleans(),
    st.lists(plains, min_size=1, max_size=6).map(tuple),
)
message_sets = st.tuples(
    st.sampled_from([0, 1]), st.lists(plains | wrappers, min_size=1, max_size=6)
)


def encode(magic: int, entries: list[Plain | Wrapper]) -> bytes:
    out = b""
    for n, entry in enumerate(entries):
        if isinstance(entry, Plain):
            out += legacy_entry(magic, 0, entry.key, entry.value, entry.timestamp, n)
            continue
        inner = b"".join(legacy_entry(magic, 0, m.key, m.value, m.timestamp, i)
                         for i, m in enumerate(entry.inner))
        attributes = entry.codec | (LOG_APPEND_TIME_BIT if entry.log_append_time else 0)
        out += legacy_entry(magic, attributes, None, codecs.compress(entry.codec, inner),
                            entry.timestamp, n)
    return out


def expected_records(magic: int, entries: list[Plain | Wrapper]
                     ) -> list[tuple[int, bytes | None, bytes | None]]:
    """(timestamp, key, value) of every message as a legacy reader sees it."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for entry in entries:
        inner = (entry,) if isinstance(entry, Plain) else entry.inner
        for m in inner:
            if magic == 0:
                ts = -1
            elif isinstance(entry, Wrapper) and entry.log_append_time:
                ts = entry.timestamp
            else:
                ts = m.timestamp
            out.append((ts, m.key, m.value))
    return out


@CONVERSION
@given(message_sets)
def test_any_legacy_set_converts_to_one_batch_of_its_messages(
    message_set: tuple[int, list[Plain | Wrapper]],
) -> None:
    magic, entries = message_set
    batch = legacy.convert_legacy_to_batch(encode(magic, entries))
    batches = list(rb.iter_batches(batch))
    assert len(batches) == 1, "a legacy set must become exactly one batch (one atomic append)"
    header, view = batches[0]
    rb.validate_batch(header, view)  # what the partition log checks before storing it
    expected = expected_records(magic, entries)
    assert header.records_count == len(expected)
    first_codec = next((e.codec for e in entries if isinstance(e, Wrapper)), codecs.NONE)
    assert header.compression == first_codec
    assert header.timestamp_type == 0  # CreateTime; the partition log stamps LogAppendTime
    ours = rb.decode_records(batch)
    assert [r.offset for r in ours] == list(range(len(expected)))
    assert [(r.timestamp, r.key, r.value) for r in ours] == expected
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert [(r.timestamp, r.key, r.value) for r in theirs] == expected


def test_the_list_form_is_the_same_single_batch() -> None:
    wrapper = Wrapper(codecs.GZIP, 9, False, (Plain(None, b"x", 7),))
    data = encode(1, [Plain(b"k", b"v", 5), wrapper])
    assert legacy.convert_legacy_message_set(data) == [legacy.convert_legacy_to_batch(data)]


@pytest.mark.parametrize(("outer", "inner"), [(0, 1), (1, 0)])
def test_inner_magic_must_match_the_wrapper(outer: int, inner: int) -> None:
    """Kafka's LogValidator: "Log record magic does not match outer magic"."""
    inner_set = legacy_entry(inner, 0, None, b"x", 3)
    wrapper = legacy_entry(outer, codecs.GZIP, None, codecs.compress(codecs.GZIP, inner_set), 3)
    with pytest.raises(InvalidRecordError, match="outer magic"):
        legacy.convert_legacy_to_batch(wrapper)
