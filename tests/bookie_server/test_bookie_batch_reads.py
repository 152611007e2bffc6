"""Batch reads (READ_ENTRIES) on the wire: the codec refuses what cannot be a batch answer, and
a bookie answers consecutive entries within its own caps whatever the request asks."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_backend.bookie.frame_decoder import FrameDecoder
from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.protocol import (
    PROTOCOL_VERSION,
    OpCode,
    ProtocolError,
    ReadEntriesRequest,
    ReadEntriesResponse,
    Status,
    decode_frame,
    encode,
)
from ledger_backend.bookie.server import serve_bookie
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorage, BookieStorageConfig
from tests.bookie_server.bookie_wire_client import RawBookieClient

_HEAD = struct.Struct(">BBQHqqqI")  # version, op, request id, status, ledger, first, lac, count
_RESPONSE_OP = int(OpCode.READ_ENTRIES) | 0x80


def _answer_frame(count: int, tail: bytes) -> bytes:
    """A batch answer's frame (no length prefix) announcing `count` entries, then `tail`."""
    return _HEAD.pack(PROTOCOL_VERSION, _RESPONSE_OP, 1, 0, 5, 0, 3, count) + tail


def test_a_count_the_frame_cannot_hold_is_refused_before_allocating() -> None:
    with pytest.raises(ProtocolError, match="cannot fit"):
        decode_frame(_answer_frame(2**32 - 1, b""))


def test_an_entry_longer_than_the_frame_and_trailing_bytes_are_refused() -> None:
    with pytest.raises(ProtocolError, match="overruns"):
        decode_frame(_answer_frame(1, struct.pack(">I", 100) + b"abc"))
    with pytest.raises(ProtocolError, match="after the last entry"):
        decode_frame(_answer_frame(1, struct.pack(">I", 3) + b"abcXY"))
    with pytest.raises(ProtocolError):  # a request with a body it does not have
        decode_frame(encode(ReadEntriesRequest(1, 2, 3, 4, 5))[4:] + b"x")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=6), st.data())
def test_damaged_batch_answers_fail_only_as_protocol_errors(bodies: list[bytes],
                                                             data: st.DataObject) -> None:
    frame = bytearray(encode(ReadEntriesResponse(7, Status.OK, 1, 10, 12, tuple(bodies)))[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    try:
        message = decode_frame(bytes(frame[:cut]))
    except ProtocolError:
        return
    if isinstance(message, ReadEntriesResponse):  # what decodes is exactly what is there
        assert len(encode(message)) - 4 == cut


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 64))
def test_a_client_stream_refuses_an_oversize_batch_before_buffering_it(count: int,
                                                                       limit_kib: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=limit_kib * 1024 + 64, accept="responses")
    big = encode(ReadEntriesResponse(1, Status.OK, 1, 0, 0, (b"x" * (limit_kib * 1024 + 64),)))
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        decoder.feed(big[:8])  # refused from the length field alone


@asynccontextmanager
async def _served(storage: BookieStorage, **options: object
                  ) -> AsyncIterator[RawBookieClient]:  # fmt: skip
    async with trio.open_nursery() as nursery:
        address = await nursery.start(lambda task_status: serve_bookie(
            storage, None, "127.0.0.1", 0, task_status=task_status,
            **options))  # type: ignore[arg-type]  # fmt: skip
        stream = await trio.open_tcp_stream(address.host, address.port)
        try:
            yield RawBookieClient(stream)
        finally:
            await trio.aclose_forcefully(stream)
            nursery.cancel_scope.cancel()


async def _fill(storage: BookieStorage, ledger_id: int, sizes: list[int]) -> list[bytes]:
    entries = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    for i, body in enumerate(entries):
        await storage.add_entry(ledger_id, i, i - 1, body)
    return entries


async def _batch(client: RawBookieClient, first: int, count: int, max_bytes: int
                 ) -> ReadEntriesResponse:  # fmt: skip
    response = await client.request(ReadEntriesRequest(1, 1, first, count, max_bytes))
    assert isinstance(response, ReadEntriesResponse)
    return response


async def _check_caps(client: RawBookieClient, entries: list[bytes]) -> None:
    # the bookie's caps (8 entries, 4 KiB) win over a request for everything
    answer = await _batch(client, 0, 2**32 - 1, 2**32 - 1)
    assert answer.status is Status.OK and answer.first_entry_id == 0
    assert list(answer.bodies) == entries[: len(answer.bodies)]
    assert 1 <= len(answer.bodies) <= 8 and sum(map(len, answer.bodies)) <= 4096
    # the request's own smaller budget; the first entry always comes, even if larger
    answer = await _batch(client, 2, 100, 1)
    assert list(answer.bodies) == [entries[2]]
    answer = await _batch(client, 3, 3, 1 << 20)
    assert list(answer.bodies) == entries[3:6]
    # the batch ends at the ledger's last entry; past it: NO_SUCH_ENTRY
    answer = await _batch(client, len(entries) - 2, 8, 4096)
    assert list(answer.bodies) == entries[-2:]
    answer = await _batch(client, len(entries), 8, 4096)
    assert answer.status is Status.NO_SUCH_ENTRY and answer.bodies == ()
    for bad in (ReadEntriesRequest(2, -1, 0, 1, 1), ReadEntriesRequest(3, 1, -1, 1, 1),
                ReadEntriesRequest(4, 1, 0, 0, 1)):  # fmt: skip
        refused = await client.request(bad)
        assert isinstance(refused, ReadEntriesResponse) and refused.status is Status.BAD_REQUEST


_SIZES = [700, 900, 5000, 100, 200, 300, 400, 500, 600, 50, 60]


async def test_memory_bookie_answers_within_its_caps() -> None:
    storage = MemoryBookieStorage()
    entries = await _fill(storage, 1, _SIZES)
    async with _served(storage, max_batch_entries=8, max_batch_bytes=4096) as client:
        await _check_caps(client, entries)


async def test_durable_bookie_answers_within_its_caps_from_cache_and_entry_logs(
    tmp_path: Path,
) -> None:
    config = BookieStorageConfig(data_dir=tmp_path, flush_interval_s=3600.0,
                                 disk_check_interval_s=3600.0)  # fmt: skip
    async with open_bookie_storage(config) as storage:
        entries = await _fill(storage, 1, _SIZES)
        async with _served(storage, max_batch_entries=8, max_batch_bytes=4096) as client:
            await _check_caps(client, entries)  # from the write cache
            await storage.checkpoint()  # type: ignore[attr-defined]
            storage.read_cache.drop_ledger(1)  # type: ignore[attr-defined]
            await _check_caps(client, entries)  # from the entry logs


async def test_a_bookie_without_batch_reads_answers_bad_request() -> None:
    storage = MemoryBookieStorage()
    await _fill(storage, 1, [10, 10])
    async with _served(storage, batch_reads=False) as client:
        answer = await _batch(client, 0, 2, 100)
        assert answer.status is Status.BAD_REQUEST


def _damage_entry_log(data_dir: Path, payload: bytes) -> None:
    """Flip a byte of `payload` where the bookie's (one) entry log holds it."""
    (log,) = data_dir.rglob("*.log")
    data = bytearray(log.read_bytes())
    data[data.index(payload) + 10] ^= 0xFF
    log.write_bytes(data)


async def test_batch_reads_from_entry_logs_skip_the_read_cache_and_stop_at_a_bad_record(
    tmp_path: Path,
) -> None:
    """Entries a batch read takes from the entry logs are answered without entering the read
    cache (a scan must not evict the tail's readers' entries; what is cached is used); a
    record that fails its check ends the batch before it, and a batch from it is refused."""
    config = BookieStorageConfig(data_dir=tmp_path, flush_interval_s=3600.0,
                                 disk_check_interval_s=3600.0, read_ahead_entries=1)  # fmt: skip
    async with open_bookie_storage(config) as storage:
        entries = await _fill(storage, 1, _SIZES)
        await storage.checkpoint()  # type: ignore[attr-defined]
        cache = storage.read_cache  # type: ignore[attr-defined]
        cache.drop_ledger(1)
        assert await storage.read_entry(1, 4) == entries[4]  # now cached, alone
        async with _served(storage, max_batch_entries=64, max_batch_bytes=1 << 20) as client:
            answer = await _batch(client, 0, 64, 1 << 20)
            assert list(answer.bodies) == entries
            assert [e for e in range(len(entries)) if cache.get(1, e) is not None] == [4]
            _damage_entry_log(tmp_path, entries[7])
            answer = await _batch(client, 0, 64, 1 << 20)
            assert list(answer.bodies) == entries[:7]
            answer = await _batch(client, 7, 64, 1 << 20)
            assert answer.status is not Status.OK and answer.bodies == ()
