"""The bookie server over real TCP (127.0.0.1, port 0) in front of MemoryBookieStorage."""

from __future__ import annotations

import logging
import struct

import pytest
import trio

from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.protocol import (
    AddEntryRequest,
    AddEntryResponse,
    BookieInfoRequest,
    BookieInfoResponse,
    ReadEntryRequest,
    ReadEntryResponse,
    ReadLacRequest,
    ReadLacResponse,
    Status,
    WriteLacRequest,
    WriteLacResponse,
    encode,
)
from ledger_backend.bookie.server import serve_bookie
from tests.bookie_server.bookie_wire_client import (
    Connect,
    RawBookieClient,
    ServedBookie,
    wait_until,
)


async def _add(client: RawBookieClient, ledger: int, entry: int, lac: int, body: bytes) -> Status:
    response = await client.request(AddEntryRequest(entry + 1000, ledger, entry, lac, False, body))
    assert isinstance(response, AddEntryResponse)
    assert (response.ledger_id, response.entry_id) == (ledger, entry)
    return response.status


async def test_add_read_lac_and_info(served_bookie: ServedBookie, connect: Connect) -> None:
    client = await connect()
    for entry in range(3):
        assert await _add(client, 7, entry, entry - 1, b"entry-%d" % entry) is Status.OK
    response = await client.request(ReadEntryRequest(1, 7, 1))
    assert response == ReadEntryResponse(1, Status.OK, 7, 1, 1, b"entry-1")
    assert await client.request(ReadLacRequest(2, 7)) == ReadLacResponse(2, Status.OK, 7, 1)
    info = await client.request(BookieInfoRequest(3))
    assert isinstance(info, BookieInfoResponse) and info.status is Status.OK
    assert info.bookie_id == str(served_bookie.address)
    assert info.total_bytes - info.free_bytes == len(b"entry-0entry-1entry-2")
    assert not info.read_only


async def test_missing_ledger_entry_and_bad_requests(connect: Connect) -> None:
    client = await connect()
    assert (await client.request(ReadEntryRequest(1, 99, 0))).status is Status.NO_SUCH_LEDGER  # type: ignore[union-attr]
    assert (await client.request(ReadLacRequest(2, 99))).status is Status.NO_SUCH_LEDGER  # type: ignore[union-attr]
    assert await _add(client, 5, 0, -1, b"x") is Status.OK
    assert (await client.request(ReadEntryRequest(3, 5, 4))).status is Status.NO_SUCH_ENTRY  # type: ignore[union-attr]
    # entry -1 without fence or long poll, negative ids: answered, connection stays open
    assert (await client.request(ReadEntryRequest(4, 5, -1))).status is Status.BAD_REQUEST  # type: ignore[union-attr]
    assert await _add(client, -3, 0, -1, b"x") is Status.BAD_REQUEST
    assert (await client.request(ReadLacRequest(5, -1))).status is Status.BAD_REQUEST  # type: ignore[union-attr]
    assert await _add(client, 5, 1, 0, b"y") is Status.OK


async def test_adds_are_pipelined_and_answered_after_the_fsync(
    served_bookie: ServedBookie, connect: Connect
) -> None:
    storage = served_bookie.storage
    storage.hold_adds()  # the "journal fsync" does not complete until released
    client = await connect()
    count = 200
    await client.send(*(AddEntryRequest(i, 1, i, i - 1, False, b"%d" % i) for i in range(count)))
    await wait_until(lambda: storage.adds_in_flight == count)
    # nothing is acknowledged before the fsync, but other requests still get answers
    lac = await client.request(ReadLacRequest(10_000, 1))
    assert lac == ReadLacResponse(10_000, Status.OK, 1, -1)
    storage.release_adds()
    responses = await client.receive(count)
    assert sorted(r.request_id for r in responses) == list(range(count))
    assert all(r.status is Status.OK for r in responses)  # type: ignore[union-attr]
    assert storage.last_add_confirmed(1) == count - 2


async def test_fencing_read_stops_the_old_writer(
    served_bookie: ServedBookie, connect: Connect
) -> None:
    writer = await connect()
    recovery = await connect()
    for entry in range(3):
        assert await _add(writer, 3, entry, entry - 1, b"e%d" % entry) is Status.OK
    fenced = await recovery.request(ReadEntryRequest(1, 3, -1, fence=True))
    assert fenced == ReadEntryResponse(1, Status.OK, 3, -1, 1, b"")
    assert served_bookie.storage.is_fenced(3)
    assert await _add(writer, 3, 3, 2, b"late") is Status.FENCED
    # a recovery read fences and reads; a recovery add still goes through
    read = await recovery.request(ReadEntryRequest(2, 3, 2, fence=True))
    assert read == ReadEntryResponse(2, Status.OK, 3, 2, 1, b"e2")
    add = await recovery.request(AddEntryRequest(3, 3, 2, 1, True, b"e2"))
    assert add == AddEntryResponse(3, Status.OK, 3, 2)
    # fencing a ledger this bookie never saw still stops a writer here
    assert (await recovery.request(ReadEntryRequest(4, 77, -1, fence=True))).status is Status.OK  # type: ignore[union-attr]
    assert await _add(writer, 77, 0, -1, b"x") is Status.FENCED


async def test_long_poll_returns_the_next_entry_when_lac_moves(connect: Connect) -> None:
    writer = await connect()
    reader = await connect()
    assert await _add(writer, 4, 0, -1, b"zero") is Status.OK
    await reader.send(ReadEntryRequest(1, 4, 1, wait_for_lac_above=0, timeout_ms=10_000))
    assert await _add(writer, 4, 1, 0, b"one") is Status.OK  # LAC 0: not above 0 yet
    with trio.move_on_after(0.05):
        await reader.receive()
        pytest.fail("long poll answered before the LAC moved")
    assert await _add(writer, 4, 2, 1, b"two") is Status.OK  # LAC 1
    (response,) = await reader.receive()
    assert response == ReadEntryResponse(1, Status.OK, 4, 1, 1, b"one")
    # LAC only (entry -1) and a poll that times out
    lac_only = await reader.request(ReadEntryRequest(2, 4, -1, wait_for_lac_above=0))
    assert lac_only == ReadEntryResponse(2, Status.OK, 4, -1, 1)
    timed_out = await reader.request(ReadEntryRequest(3, 4, 2, wait_for_lac_above=1, timeout_ms=20))
    assert timed_out == ReadEntryResponse(3, Status.TIMEOUT, 4, 2, 1)


async def test_long_poll_does_not_block_other_requests(connect: Connect) -> None:
    client = await connect()
    await client.send(ReadEntryRequest(1, 8, 6, wait_for_lac_above=5, timeout_ms=10_000))
    assert await _add(client, 8, 0, -1, b"x") is Status.OK  # answered past the waiting poll
    assert await client.request(ReadLacRequest(2, 8)) == ReadLacResponse(2, Status.OK, 8, -1)


async def test_read_only_bookie_refuses_writes_but_serves_reads(
    served_bookie: ServedBookie, connect: Connect
) -> None:
    client = await connect()
    assert await _add(client, 2, 0, -1, b"x") is Status.OK
    served_bookie.storage.set_read_only(True)
    assert await _add(client, 2, 1, 0, b"y") is Status.READ_ONLY
    assert (await client.request(ReadEntryRequest(1, 2, 0))).status is Status.OK  # type: ignore[union-attr]
    info = await client.request(BookieInfoRequest(2))
    assert isinstance(info, BookieInfoResponse) and info.read_only


@pytest.mark.parametrize(
    "bad_bytes, log_text",
    [
        (struct.pack(">IBB", 10, 9, 1) + b"\x00" * 8, "version"),  # malformed
        (struct.pack(">IBB", 6, 1, 0x55) + b"\x00" * 4, "op code"),  # malformed
        (struct.pack(">I", 0xFFFF_FFF0), "exceeds"),  # oversize, no body ever sent
        (encode(ReadLacResponse(1, Status.OK, 1, 1)), "response"),  # wrong direction
        (encode(ReadLacRequest(1, 1))[:-3], "mid-frame"),  # truncated, then EOF
    ],
)
async def test_bad_frames_close_only_that_connection(
    connect: Connect, caplog: pytest.LogCaptureFixture, bad_bytes: bytes, log_text: str
) -> None:
    good = await connect()
    bad = await connect()
    assert await _add(good, 1, 0, -1, b"a") is Status.OK
    with caplog.at_level(logging.DEBUG, logger="ledger_backend.bookie.server"):
        await bad.send_raw(bad_bytes)
        await bad.stream.send_eof()
        assert await bad.closed_by_peer()
        await wait_until(lambda: log_text in caplog.text)
    bad_port = bad.stream.socket.getsockname()[1]
    assert f"127.0.0.1:{bad_port}" in caplog.text  # the peer is named in the log
    assert await _add(good, 1, 1, 0, b"b") is Status.OK
    fresh = await connect()
    assert await fresh.request(ReadLacRequest(1, 1)) == ReadLacResponse(1, Status.OK, 1, 0)


async def test_big_entries_round_trip(connect: Connect) -> None:
    client = await connect()
    body = bytes(range(256)) * 1024  # 256 KB
    assert await _add(client, 9, 0, -1, body) is Status.OK
    response = await client.request(ReadEntryRequest(1, 9, 0))
    assert isinstance(response, ReadEntryResponse) and response.body == body


async def test_shutdown_drains_in_flight_adds() -> None:
    storage = MemoryBookieStorage()
    storage.hold_adds()
    async with trio.open_nursery() as nursery:
        server_scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED) -> None:
            with server_scope:
                await serve_bookie(
                    storage, None, "127.0.0.1", 0, drain_timeout_s=5, task_status=task_status
                )

        address = await nursery.start(run)
        stream = await trio.open_tcp_stream(address.host, address.port)  # type: ignore[attr-defined]
        client = RawBookieClient(stream)
        await client.send(*(AddEntryRequest(i, 1, i, i - 1, False, b"x") for i in range(5)))
        await wait_until(lambda: storage.adds_in_flight == 5)
        server_scope.cancel()  # graceful stop: no new connections, in-flight adds finish
        await trio.sleep(0.02)
        with pytest.raises(OSError):
            await trio.open_tcp_stream(address.host, address.port)  # type: ignore[attr-defined]
        storage.release_adds()
        responses = await client.receive(5)
        assert {r.request_id for r in responses} == set(range(5))
        assert await client.closed_by_peer()
        await client.aclose()


async def test_shutdown_answers_long_polls_with_timeout() -> None:
    storage = MemoryBookieStorage()
    async with trio.open_nursery() as nursery:
        server_scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[object] = trio.TASK_STATUS_IGNORED) -> None:
            with server_scope:
                await serve_bookie(
                    storage, None, "127.0.0.1", 0, drain_timeout_s=30, task_status=task_status
                )

        address = await nursery.start(run)
        stream = await trio.open_tcp_stream(address.host, address.port)  # type: ignore[attr-defined]
        client = RawBookieClient(stream)
        assert await _add(client, 6, 0, -1, b"x") is Status.OK
        await client.send(ReadEntryRequest(1, 6, 0, wait_for_lac_above=0, timeout_ms=60_000))
        await trio.sleep(0.02)
        server_scope.cancel()
        with trio.fail_after(2):  # not 30 s of drain, not 60 s of poll
            (response,) = await client.receive()
            assert response == ReadEntryResponse(1, Status.TIMEOUT, 6, 0, -1)
            assert await client.closed_by_peer()
        await client.aclose()


async def test_unanswered_add_bytes_per_connection_are_bounded(nursery: trio.Nursery) -> None:
    storage = MemoryBookieStorage()
    storage.hold_adds()
    address = await nursery.start(
        lambda task_status: serve_bookie(
            storage,
            None,
            "127.0.0.1",
            0,
            max_in_flight_bytes_per_connection=1000,
            task_status=task_status,
        )  # fmt: skip
    )
    client = RawBookieClient(await trio.open_tcp_stream(address.host, address.port))
    await client.send(*(AddEntryRequest(i, 1, i, i - 1, False, b"x" * 400) for i in range(5)))
    await wait_until(lambda: storage.adds_in_flight == 2)
    await trio.sleep(0.05)
    assert storage.adds_in_flight == 2  # a third 400-byte body would pass the 1000-byte budget
    storage.release_adds()
    responses = await client.receive(5)
    assert sorted(r.request_id for r in responses) == list(range(5))
    await client.aclose()


async def test_write_lac_raises_never_lowers_and_respects_fencing(connect: Connect) -> None:
    client = await connect()
    assert await client.request(WriteLacRequest(1, 7, 3)) == WriteLacResponse(
        1, Status.NO_SUCH_LEDGER, 7)
    assert await _add(client, 7, 0, -1, b"e0") is Status.OK
    assert await _add(client, 7, 1, 0, b"e1") is Status.OK
    assert await client.request(ReadLacRequest(2, 7)) == ReadLacResponse(2, Status.OK, 7, 0)
    assert await client.request(WriteLacRequest(3, 7, 1)) == WriteLacResponse(3, Status.OK, 7)
    assert await client.request(ReadLacRequest(4, 7)) == ReadLacResponse(4, Status.OK, 7, 1)
    assert await client.request(WriteLacRequest(5, 7, 0)) == WriteLacResponse(5, Status.OK, 7)
    assert await client.request(ReadLacRequest(6, 7)) == ReadLacResponse(6, Status.OK, 7, 1)
    assert await client.request(WriteLacRequest(7, -1, 0)) == WriteLacResponse(
        7, Status.BAD_REQUEST, -1)
    fence = await client.request(ReadEntryRequest(8, 7, -1, fence=True))
    assert fence.status is Status.OK  # type: ignore[union-attr]
    assert await client.request(WriteLacRequest(9, 7, 5)) == WriteLacResponse(
        9, Status.FENCED, 7)
