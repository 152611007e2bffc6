"""The offload object format and both drivers (a directory; S3 against moto's real server)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import crc32c
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_backend.offload import (
    FilesystemOffloader,
    ObjectFormatError,
    ObjectMissingError,
    OffloadedReader,
    OffloadedReadError,
    Offloader,
    OffloadLocation,
)
from ledger_backend.offload.object_format import decode_whole, encode_object, encode_object_parts
from ledger_backend.offload.object_store import ObjectStoreOffloader
from tests.offload.moto_server import moto_s3


@given(
    st.lists(st.binary(max_size=300), max_size=60),
    st.integers(min_value=1, max_value=2000),
)
@settings(max_examples=60, deadline=None)
def test_object_round_trips(entries: list[bytes], block_bytes: int) -> None:
    data = encode_object(7, entries, block_bytes)
    index, back = decode_whole(data)
    assert back == entries and index.entries == len(entries) and index.ledger_id == 7
    parts = encode_object_parts(7, entries, block_bytes)
    assert parts.joined() == data and parts.size == len(data)
    assert parts.crc == crc32c.crc32c(data)


@given(st.data())
@settings(max_examples=80, deadline=None)
def test_any_flipped_byte_is_detected(data: st.DataObject) -> None:
    entries = [bytes([i]) * (i * 7 % 50 + 1) for i in range(40)]
    obj = bytearray(encode_object(3, entries, 200))
    pos = data.draw(st.integers(min_value=0, max_value=len(obj) - 1))
    obj[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(ObjectFormatError):
        decode_whole(bytes(obj))


async def _exercise(offloader: Offloader) -> None:
    rng = random.Random(5)
    entries = [rng.randbytes(rng.randrange(0, 3000)) for _ in range(500)]
    obj = encode_object(42, entries, block_bytes=16 << 10)
    await offloader.put("ml/42-a.lwo", obj)
    assert await offloader.size("ml/42-a.lwo") == len(obj)
    where = OffloadLocation(offloader.driver, "ml/42-a.lwo", len(obj))
    reader = OffloadedReader({offloader.driver: offloader}, cache_bytes=64 << 10)
    for first, last in [(0, 0), (0, 499), (123, 321), (499, 499), (250, 260)]:
        assert await reader.read(where, 42, first, last) == entries[first : last + 1]
    with pytest.raises(OffloadedReadError):
        await reader.read(where, 42, 0, 500)
    with pytest.raises(OffloadedReadError, match="42-b"):
        await reader.read(OffloadLocation(offloader.driver, "ml/42-b.lwo", len(obj)), 42, 0, 1)
    with pytest.raises(ObjectMissingError):
        await offloader.size("ml/none.lwo")
    # a corrupted copy under another key is reported, never served
    bad = bytearray(obj)
    bad[len(obj) // 2] ^= 0xFF
    await offloader.put("ml/42-bad.lwo", bytes(bad))
    cold = OffloadedReader({offloader.driver: offloader})
    with pytest.raises(OffloadedReadError, match="42-bad.lwo"):
        await cold.read(OffloadLocation(offloader.driver, "ml/42-bad.lwo", len(obj)), 42, 0, 499)
    await offloader.delete("ml/42-a.lwo")
    await offloader.delete("ml/42-a.lwo")
    with pytest.raises(ObjectMissingError):
        await offloader.size("ml/42-a.lwo")


def test_filesystem_driver(tmp_path: Path) -> None:
    offloader = FilesystemOffloader(tmp_path / "objects")
    trio.run(_exercise, offloader)
    assert not list((tmp_path / "objects").rglob("*.tmp-*"))
    with pytest.raises(ValueError):
        trio.run(offloader.put, "../escape", b"x")


def test_staged_files_left_by_a_crash_are_swept_at_start(tmp_path: Path) -> None:
    """A staged file whose offload died before its commit (never discarded: kill -9) is
    removed by the offload service's sweep at start once older than the grace; a fresh
    staged file (an upload in progress elsewhere) and stored objects stay."""
    import os

    from gateway.topics.offload_service import _STAGED_GRACE_S, OffloadService

    offloader = FilesystemOffloader(tmp_path / "tier")
    crashed = offloader.stage("ns%2Ft-0/5-aaa.lwo")
    running = offloader.stage("ns%2Ft-0/6-bbb.lwo")
    crashed.write([b"half an object"])
    running.write([b"being written"])
    old = os.stat(crashed.tmp).st_mtime - _STAGED_GRACE_S - 60
    os.utime(crashed.tmp, (old, old))
    trio.run(offloader.put, "ns%2Ft-0/4-ccc.lwo", b"a stored object")
    service = OffloadService(None, offloader=offloader, interval_s=3600)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.run)
            with trio.fail_after(30):
                while crashed.tmp.exists():  # noqa: ASYNC110 - a file, polled
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert running.tmp.exists()
    assert trio.run(offloader.get_range, "ns%2Ft-0/4-ccc.lwo", 0, 100) == b"a stored object"
    assert sorted(p.name for p in (tmp_path / "tier" / "ns%2Ft-0").iterdir()) == [
        "4-ccc.lwo", running.tmp.name]
    running.discard()


def test_filesystem_put_of_parts_writes_their_concatenation(tmp_path: Path) -> None:
    parts = [bytes([i % 251]) * (i % 9) for i in range(3000)]  # more than one writev's worth
    offloader = FilesystemOffloader(tmp_path)
    trio.run(offloader.put, "ml/parts.lwo", parts)
    assert (tmp_path / "ml" / "parts.lwo").read_bytes() == b"".join(parts)


def test_filesystem_group_put_stores_every_object_or_leaves_no_partial_one(tmp_path: Path
                                                                         ) -> None:  # fmt: skip
    """A group put stores each object whole under its key; a group that fails while writing
    (here the third object's directory cannot be made) renames nothing and leaves no
    temporary file behind."""
    from ledger_backend.offload import ObjectStoreUnavailableError

    offloader = FilesystemOffloader(tmp_path)
    objects = [(f"ml/{i}-g.lwo", [bytes([i]) * 5000, b"tail"]) for i in range(3)]
    trio.run(offloader.put_group, objects)
    for key, parts in objects:
        assert (tmp_path / key).read_bytes() == b"".join(parts)
    (tmp_path / "blocked").write_bytes(b"a file where a directory should be")
    failing = [(f"ml/{i}-h.lwo", [b"x" * 5000]) for i in range(2)]
    with pytest.raises(ObjectStoreUnavailableError, match="blocked"):
        trio.run(offloader.put_group, [*failing, ("blocked/9-h.lwo", [b"y"])])
    assert not list(tmp_path.rglob("*-h.lwo*"))  # neither renamed nor left as .tmp-*
    assert sorted(p.name for p in (tmp_path / "ml").iterdir()) == ["0-g.lwo", "1-g.lwo",
                                                                  "2-g.lwo"]  # fmt: skip


class _NoReadBack:
    """The filesystem driver without its own read-back: verification goes by get_range."""

    def __init__(self, inner: FilesystemOffloader) -> None:
        self._inner = inner

    @property
    def driver(self) -> str:
        return self._inner.driver

    @property
    def location(self) -> str:
        return self._inner.location

    @property
    def location_fields(self) -> dict[str, str]:
        return self._inner.location_fields

    def at(self, fields: dict[str, str]) -> Offloader:
        return _NoReadBack(self._inner.at(fields))

    async def put(self, key: str, data: bytes | Sequence[bytes]) -> None:
        await self._inner.put(key, data)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        return await self._inner.get_range(key, start, length)

    async def size(self, key: str) -> int:
        return await self._inner.size(key)

    async def delete(self, key: str) -> None:
        await self._inner.delete(key)


@pytest.mark.parametrize("own_read_back", [True, False])
def test_an_upload_that_reads_back_different_fails_verification(tmp_path: Path,
                                                                own_read_back: bool) -> None:
    """The upload check reads every byte back (the filesystem driver in one pass of its own,
    others by ranges): one flipped byte anywhere, or a missing byte, is an ObjectFormatError."""
    from ledger_backend.managed_ledger.offloading import _verify

    fs = FilesystemOffloader(tmp_path)
    offloader: Offloader = fs if own_read_back else _NoReadBack(fs)
    data = encode_object_parts(9, [bytes([i]) * (3 << 20) for i in range(3)])  # > 1 chunk
    trio.run(offloader.put, "ml/9-x.lwo", data.parts)
    trio.run(_verify, offloader, "ml/9-x.lwo", data)
    path = tmp_path / "ml" / "9-x.lwo"
    stored = bytearray(path.read_bytes())
    stored[len(stored) * 2 // 3] ^= 1
    path.write_bytes(stored)
    with pytest.raises(ObjectFormatError, match="9-x.lwo"):
        trio.run(_verify, offloader, "ml/9-x.lwo", data)
    stored[len(stored) * 2 // 3] ^= 1
    path.write_bytes(stored[:-1])
    with pytest.raises(ObjectFormatError, match="9-x.lwo"):
        trio.run(_verify, offloader, "ml/9-x.lwo", data)
    with pytest.raises(ObjectMissingError):
        trio.run(_verify, offloader, "ml/none.lwo", data)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_s3("ledgers") as endpoint:
        yield endpoint


def test_s3_driver_against_moto_server(s3_endpoint: str) -> None:
    offloader = ObjectStoreOffloader.s3(
        "ledgers", prefix="tiered", endpoint=s3_endpoint,
        access_key_id="test", secret_access_key="test",
    )
    trio.run(_exercise, offloader)


def test_s3_driver_reports_a_missing_bucket(s3_endpoint: str) -> None:
    offloader = ObjectStoreOffloader.s3(
        "no-such-bucket", endpoint=s3_endpoint, access_key_id="test", secret_access_key="test"
    )
    with pytest.raises(Exception) as info:
        trio.run(offloader.put, "k", b"data")
    assert "test" not in str(info.value).replace("no-such-bucket", "")


def _multipart_uploads(endpoint: str) -> int:
    import urllib.request

    listing = urllib.request.urlopen(f"{endpoint}/ledgers?uploads", timeout=30).read()
    return listing.count(b"<Upload>")


def test_s3_staged_upload_streams_parts_before_it_is_stored(s3_endpoint: str) -> None:
    """A staged object goes up as a multipart upload while it is written: parts are in the
    store before the commit (the old driver joined everything and put once at the end),
    nothing is under the key until the commit, and a discarded upload is aborted."""
    offloader = ObjectStoreOffloader.s3(
        "ledgers", prefix="staged", endpoint=s3_endpoint,
        access_key_id="test", secret_access_key="test",
    )
    rng = random.Random(7)
    pieces = [[rng.randbytes(1 << 20) for _ in range(4)] for _ in range(4)]  # 16 MiB

    async def main() -> None:
        kept, dropped = offloader.stage("ml/kept.lwo"), offloader.stage("ml/dropped.lwo")
        for piece in pieces:
            await trio.to_thread.run_sync(kept.write, piece)
            await trio.to_thread.run_sync(dropped.write, piece[:1])
        assert _multipart_uploads(s3_endpoint) >= 1  # under way, not held back in memory
        with pytest.raises(ObjectMissingError):
            await offloader.size("ml/kept.lwo")
        await trio.to_thread.run_sync(dropped.discard)
        await offloader.commit_group([kept])
        whole = b"".join(b"".join(p) for p in pieces)
        assert await offloader.size("ml/kept.lwo") == len(whole)
        assert await offloader.get_range("ml/kept.lwo", 0, len(whole)) == whole
        with pytest.raises(ObjectMissingError):
            await offloader.size("ml/dropped.lwo")
        assert _multipart_uploads(s3_endpoint) == 0

    trio.run(main)


@given(st.binary(max_size=400), st.integers(min_value=0, max_value=500))
@settings(max_examples=150, deadline=None)
def test_garbage_objects_are_a_clear_error(garbage: bytes, recorded_size: int) -> None:
    """Any bytes under a key, any recorded size: OffloadedReadError, never another exception
    and never entries."""

    async def attempt() -> None:
        store = MemoryObjects({"k": garbage})
        reader = OffloadedReader({"memory": store})
        with pytest.raises(OffloadedReadError):
            await reader.read(OffloadLocation("memory", "k", recorded_size), 1, 0, 3)

    trio.run(attempt)


class MemoryObjects:
    """An in-memory Offloader for the fuzz test (the real drivers are tested above)."""

    driver = "memory"
    location = "memory"
    location_fields: dict[str, str] = {}

    def __init__(self, objects: dict[str, bytes]) -> None:
        self._objects = objects

    def at(self, fields: dict[str, str]) -> Offloader:
        return self

    async def put(self, key: str, data: bytes | Sequence[bytes]) -> None:
        self._objects[key] = data if isinstance(data, bytes) else b"".join(data)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        if key not in self._objects:
            raise ObjectMissingError(key)
        return self._objects[key][start : start + length]

    async def size(self, key: str) -> int:
        return len(self._objects[key])

    async def delete(self, key: str) -> None:
        self._objects.pop(key, None)


@given(st.data())
@settings(max_examples=150, deadline=None)
def test_a_damaged_object_never_yields_a_wrong_byte(data: st.DataObject) -> None:
    """A valid object with one byte flipped or its tail cut, read over any range: the right
    entries or OffloadedReadError, nothing else."""
    entries = [bytes([i]) * (i * 13 % 90) for i in range(30)]
    obj = bytearray(encode_object(9, entries, 150))
    size = len(obj)
    if data.draw(st.booleans()):
        pos = data.draw(st.integers(min_value=0, max_value=len(obj) - 1))
        obj[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    else:
        obj = obj[: data.draw(st.integers(min_value=0, max_value=len(obj) - 1))]
    first = data.draw(st.integers(min_value=0, max_value=29))
    last = data.draw(st.integers(min_value=first, max_value=29))

    async def attempt() -> None:
        reader = OffloadedReader({"memory": MemoryObjects({"k": bytes(obj)})})
        try:
            got = await reader.read(OffloadLocation("memory", "k", size), 9, first, last)
        except OffloadedReadError:
            return
        assert got == entries[first : last + 1]

    trio.run(attempt)


def test_reads_ahead_in_one_range_request_per_window() -> None:
    """A ledger read in order costs one store request per read-ahead window (plus the index),
    not one per block; a damaged block after the wanted one fails only a read that wants it."""
    entries = [bytes([i % 251]) * 1000 for i in range(400)]  # 400 kB over 1 kB blocks
    obj = encode_object(11, entries, block_bytes=10_000)

    async def sequential(readahead: int) -> int:
        store = MemoryObjects({"k": obj})
        reader = OffloadedReader({"memory": store}, cache_bytes=1 << 20,
                                 readahead_bytes=readahead)
        where = OffloadLocation("memory", "k", len(obj))
        for first in range(0, 400, 5):
            assert await reader.read(where, 11, first, first + 4) == entries[first:first + 5]
        return reader.store_reads

    assert trio.run(sequential, 0) == 3 + 40  # header, footer, index; then every block
    assert trio.run(sequential, 100_000) <= 3 + 5  # ten blocks per request

    async def damaged_later_block() -> None:
        bad = bytearray(obj)
        bad[len(obj) // 2] ^= 0xFF
        reader = OffloadedReader({"memory": MemoryObjects({"k": bytes(bad)})},
                                 readahead_bytes=1 << 20)
        where = OffloadLocation("memory", "k", len(obj))
        assert await reader.read(where, 11, 0, 9) == entries[:10]
        with pytest.raises(OffloadedReadError):
            await reader.read(where, 11, 0, 399)

    trio.run(damaged_later_block)
