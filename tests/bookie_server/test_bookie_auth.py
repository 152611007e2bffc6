"""Authenticated bookies (issue 26 part 4): a bookie with a secret serves nobody who has not
passed the AUTH handshake, both in process and as a real `python -m ledger_backend.bookie`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_backend.bookie.auth import (
    NONCE_BYTES,
    STEP_HELLO,
    STEP_PROOF,
    BookieAuthError,
    BookieHandshake,
    BookieSecret,
    ClientHandshake,
)
from ledger_backend.bookie.frame_decoder import FrameDecoder
from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.protocol import (
    AddEntryRequest,
    AddEntryResponse,
    AuthRequest,
    AuthResponse,
    BookieAddress,
    BookieInfoRequest,
    Message,
    ProtocolError,
    ReadEntriesRequest,
    ReadEntryRequest,
    ReadEntryResponse,
    ReadLacRequest,
    Status,
    encode,
)
from ledger_backend.bookie.server import serve_bookie
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.errors import LedgerError
from ledger_backend.metadata import open_store
from tests.bookie_server.bookie_wire_client import RawBookieClient
from tests.bookie_server.test_bookie_protocol import requests as protocol_requests

SECRET = BookieSecret(b"cluster-secret-0123456789")
OTHER = BookieSecret(b"another-secret-0123456789")


async def _authenticate(client: RawBookieClient, secret: BookieSecret) -> None:
    handshake = ClientHandshake(secret)
    challenge = await client.request(handshake.hello())
    assert isinstance(challenge, AuthResponse)
    done = await client.request(handshake.prove(challenge))
    assert isinstance(done, AuthResponse)
    handshake.finish(done)


async def _refused(client: RawBookieClient, request: Message) -> None:
    """The request is answered UNAUTHORIZED and the bookie closes the connection."""
    response = await client.request(request)
    assert getattr(response, "status", None) is Status.UNAUTHORIZED
    assert await client.closed_by_peer()


@pytest.fixture
async def secured(
    nursery: trio.Nursery, close_clients: None
) -> AsyncIterator[tuple[MemoryBookieStorage, BookieAddress]]:
    storage = MemoryBookieStorage()
    await storage.add_entry(7, 0, -1, b"secret record")
    address = await nursery.start(
        lambda task_status: serve_bookie(storage, None, "127.0.0.1", 0, secret=SECRET,
                                         auth_timeout_s=1.0, task_status=task_status)
    )  # fmt: skip
    yield storage, address


_OPEN: list[RawBookieClient] = []


@pytest.fixture
async def close_clients() -> AsyncIterator[None]:
    """Closes every raw client a test opened."""
    yield
    while _OPEN:
        await trio.aclose_forcefully(_OPEN.pop().stream)


async def _connect(address: BookieAddress) -> RawBookieClient:
    client = RawBookieClient(await trio.open_tcp_stream(address.host, address.port))
    _OPEN.append(client)
    return client


async def test_unauthenticated_requests_are_refused_and_change_nothing(
    secured: tuple[MemoryBookieStorage, BookieAddress],
) -> None:
    storage, address = secured
    for request in (
        ReadEntryRequest(1, 7, 0),                           # read a record
        AddEntryRequest(2, 7, 1, 0, False, b"forged"),       # append after the last entry
        AddEntryRequest(3, 7, 1, 0, True, b"forged"),        # ... as a recovery add
        ReadEntryRequest(4, 7, -1, fence=True),              # fence the open ledger
        ReadLacRequest(5, 7),
        BookieInfoRequest(6),
        ReadEntriesRequest(7, 7, 0, 100, 1 << 20),           # a batch read
    ):  # fmt: skip
        client = await _connect(address)
        await _refused(client, request)
        await client.aclose()
    assert not storage.is_fenced(7)
    assert storage.last_entry_id(7) == 0


async def test_requests_pipelined_behind_a_refused_one_fail_as_refused(
    secured: tuple[MemoryBookieStorage, BookieAddress], nursery: trio.Nursery,
) -> None:
    """A client without the secret that sends several requests at once: the bookie answers the
    first UNAUTHORIZED and closes without reading the rest; those fail with the refusal too,
    not as a lost connection (which readers take for a fault and try elsewhere)."""
    from ledger_backend.client.bookie_client import BookieConnection

    _, address = secured
    connection = BookieConnection(f"{address.host}:{address.port}", nursery, timeout_s=10)
    outcomes: list[object] = []
    done = trio.Event()

    def collect(outcome: object) -> None:
        outcomes.append(outcome)
        if len(outcomes) == 4:
            done.set()

    for entry in range(4):  # queued in one go: sent together, before any answer
        connection.submit(partial(read_entry, entry=entry), collect)
    with trio.fail_after(10):
        await done.wait()
    await connection.close()
    answered, *behind = outcomes  # the first is answered; the rest fail with its refusal
    assert getattr(answered, "status", None) is Status.UNAUTHORIZED, answered
    assert all(isinstance(o, LedgerError) and "UNAUTHORIZED" in str(o) for o in behind), behind


async def test_a_wrong_secret_is_refused_and_the_right_one_works(
    secured: tuple[MemoryBookieStorage, BookieAddress],
) -> None:
    storage, address = secured
    wrong = await _connect(address)
    with pytest.raises(BookieAuthError, match="could not prove"):
        await _authenticate(wrong, OTHER)  # the client sees the bookie has another secret
    # a client that skips the check and sends a guessed proof is refused and cut off
    guesser = await _connect(address)
    hello = await guesser.request(AuthRequest(1, STEP_HELLO, b"n" * NONCE_BYTES))
    assert getattr(hello, "status", None) is Status.OK
    await _refused(guesser, AuthRequest(2, STEP_PROOF, b"p" * 32))
    # skipping step 1, or replaying a step, is refused too
    await _refused(await _connect(address), AuthRequest(1, STEP_PROOF, b"p" * 32))

    good = await _connect(address)
    await _authenticate(good, SECRET)
    read = await good.request(ReadEntryRequest(1, 7, 0))
    assert read == ReadEntryResponse(1, Status.OK, 7, 0, -1, b"secret record")
    assert await good.request(AddEntryRequest(2, 7, 1, 0, False, b"ok")) == AddEntryResponse(
        2, Status.OK, 7, 1)  # fmt: skip
    again = await good.request(AuthRequest(3, STEP_HELLO, b"n" * NONCE_BYTES))
    assert getattr(again, "status", None) is Status.BAD_REQUEST  # one handshake per connection
    assert storage.last_entry_id(7) == 1


async def test_before_authentication_frames_are_small_and_time_is_short(
    secured: tuple[MemoryBookieStorage, BookieAddress],
) -> None:
    _, address = secured
    big = await _connect(address)
    await big.send_raw((48 << 20).to_bytes(4, "big"))  # announces 48 MiB: refused unbuffered
    assert await big.closed_by_peer()
    idle = await _connect(address)
    with trio.fail_after(5):  # auth_timeout_s=1
        assert await idle.closed_by_peer()


async def test_a_client_with_a_secret_refuses_a_bookie_without_one(
    nursery: trio.Nursery, close_clients: None
) -> None:
    address = await nursery.start(serve_bookie, MemoryBookieStorage(), None, "127.0.0.1", 0)
    client = await _connect(address)
    with pytest.raises(BookieAuthError, match="no bookie secret"):
        await _authenticate(client, SECRET)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 255), st.binary(max_size=80)), max_size=4))
def test_no_sequence_of_made_up_steps_authenticates(steps: list[tuple[int, bytes]]) -> None:
    handshake = BookieHandshake(SECRET)
    for rid, (step, payload) in enumerate(steps):
        response = handshake.answer(AuthRequest(rid, step, payload))
        assert response.step == step
        if step == STEP_PROOF:
            assert response.status is Status.UNAUTHORIZED
    assert not handshake.authenticated


def test_the_secret_is_long_and_never_shown(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 16"):
        BookieSecret(b"short")
    assert "cluster-secret" not in repr(SECRET)
    path = tmp_path / "secret"
    path.write_text("cluster-secret-0123456789\n")
    assert BookieSecret.load(file=path) == SECRET
    assert BookieSecret.load() is None


# --- a real bookie process ------------------------------------------------------------------


async def _start_bookie_process(tmp_path: Path, secret_file: Path
                                ) -> tuple[trio.Process, BookieAddress]:  # fmt: skip
    command = [
        sys.executable, "-m", "ledger_backend.bookie", "--data-dir", str(tmp_path / "data"),
        "--metadata", f"embedded:{tmp_path / 'meta'}", "--port", "0", "--bookie-id", "bk-auth",
        "--bookie-secret-file", str(secret_file), "--log-level", "warning",
    ]  # fmt: skip
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
    assert process.stdout is not None
    line = b""
    with trio.fail_after(30):
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            assert chunk, "bookie exited before it listened"
            line += chunk
    return process, BookieAddress.parse(line.decode().split()[-1])


@pytest.mark.integration
async def test_a_real_bookie_process_serves_only_authenticated_clients(
    tmp_path: Path, close_clients: None
) -> None:
    secret_file = tmp_path / "bookie.secret"
    secret_file.write_text("cluster-secret-0123456789\n")
    os.chmod(secret_file, 0o600)
    process, address = await _start_bookie_process(tmp_path, secret_file)
    try:
        assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700
        good = await _connect(address)
        await _authenticate(good, SECRET)
        added = await good.request(AddEntryRequest(1, 5, 0, -1, False, b"hello"))
        assert added == AddEntryResponse(1, Status.OK, 5, 0)
        for request in (ReadEntryRequest(1, 5, 0), AddEntryRequest(2, 5, 1, 0, True, b"forged"),
                        ReadEntryRequest(3, 5, -1, fence=True)):  # fmt: skip
            await _refused(await _connect(address), request)
        # still open and unfenced: the authenticated writer goes on
        assert await good.request(AddEntryRequest(2, 5, 1, 0, False, b"more")) == (
            AddEntryResponse(2, Status.OK, 5, 1))  # fmt: skip
        await good.aclose()
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            await process.wait()


async def test_ledger_clients_authenticate_and_recover_through_secured_bookies() -> None:
    """Writes, an ensemble change after a bookie dies, and recovery by a second client, all
    over authenticated connections; a client without the secret reads nothing."""
    from tests.ledger_client.bookie_cluster import running_bookies

    store = await open_store("memory:")
    async with running_bookies(store, 4, secret=SECRET) as cluster, \
            BookKeeper(store, timeout_s=2, bookie_secret=SECRET) as writer_bk:  # fmt: skip
        writer = await writer_bk.create_ledger(3, 3, 2)
        for i in range(5):
            await writer.append(b"entry-%d" % i)
        await cluster.stop_bookie(writer.metadata.ensembles[-1][1][0])
        for i in range(5, 10):
            await writer.append(b"entry-%d" % i)
        async with BookKeeper(store, timeout_s=2, bookie_secret=SECRET) as reader_bk:
            recovered = await reader_bk.open_ledger(writer.ledger_id, recovery=True)
            assert recovered.last_add_confirmed == 9
            assert await recovered.read(0, 9) == [b"entry-%d" % i for i in range(10)]
        async with BookKeeper(store, timeout_s=2) as anonymous:
            with pytest.raises(LedgerError):
                handle = await anonymous.open_ledger(writer.ledger_id, recovery=False)
                await handle.read(0, 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=300), st.builds(encode, protocol_requests)),
                min_size=1, max_size=6))
def test_nothing_sent_before_authentication_reaches_the_storage(chunks: list[bytes]) -> None:
    """Garbage and well-formed requests (adds, fences, reads) on an unauthenticated connection:
    the bookie answers at most refusals and handshake steps, changes nothing, keeps serving."""

    async def main() -> None:
        storage = MemoryBookieStorage()
        await storage.add_entry(7, 0, -1, b"record")
        async with trio.open_nursery() as nursery:
            address = await nursery.start(lambda task_status: serve_bookie(
                storage, None, "127.0.0.1", 0, secret=SECRET, auth_timeout_s=1.0,
                task_status=task_status))  # fmt: skip
            stream = await trio.open_tcp_stream(address.host, address.port)
            decoder = FrameDecoder(accept="responses")
            answers: list[Message] = []
            with trio.move_on_after(0.5):
                try:
                    for chunk in chunks:
                        await stream.send_all(chunk)
                    while data := await stream.receive_some(1 << 16):
                        answers += decoder.feed(data)
                except (trio.BrokenResourceError, ProtocolError):
                    pass
            await trio.aclose_forcefully(stream)
            for answer in answers:
                assert isinstance(answer, AuthResponse) or (
                    getattr(answer, "status", None) is Status.UNAUTHORIZED), answer
            assert storage.last_entry_id(7) == 0 and not storage.is_fenced(7)
            assert storage.ledger_ids() == [7]
            good = RawBookieClient(await trio.open_tcp_stream(address.host, address.port))
            await _authenticate(good, SECRET)
            assert (await good.request(ReadEntryRequest(1, 7, 0))).body == b"record"  # type: ignore[union-attr]
            await trio.aclose_forcefully(good.stream)
            nursery.cancel_scope.cancel()

    trio.run(main)


def read_entry(request_id: int, *, entry: int) -> ReadEntryRequest:
    """A read of `entry` of ledger 7."""
    return ReadEntryRequest(request_id, 7, entry)
