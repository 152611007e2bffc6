"""Read tickets (issue 27): a connection that authenticated with a ticket reads only the
ticket's ledgers, never writes or fences, and nothing after the expiry; a forged, tampered or
expired ticket does not authenticate; the ledger client reads with a ticket in place of the
secret."""

from __future__ import annotations

import dataclasses
import time

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_backend.bookie.auth import BookieAuthError, BookieHandshake, ClientHandshake
from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.protocol import (
    AddEntryRequest,
    AuthRequest,
    AuthResponse,
    BookieAddress,
    BookieInfoRequest,
    Message,
    ReadEntriesRequest,
    ReadEntryRequest,
    ReadEntryResponse,
    ReadLacRequest,
    Status,
    WriteLacRequest,
)
from ledger_backend.bookie.read_ticket import (
    ReadTicket,
    TicketError,
    TicketScope,
    decode_body,
    encode_body,
    issue_ticket,
)
from tests.bookie_server.bookie_wire_client import RawBookieClient
from tests.bookie_server.test_bookie_auth import (  # noqa: F401 - fixtures
    OTHER,
    SECRET,
    close_clients,
    secured,
)
from tests.bookie_server.test_bookie_auth import _connect as connect_raw


@pytest.fixture
async def bookie(secured: tuple[MemoryBookieStorage, BookieAddress]  # noqa: F811
                 ) -> tuple[MemoryBookieStorage, BookieAddress]:  # fmt: skip
    """test_bookie_auth's secured bookie (ledger 7) with a second ledger, 8."""
    await secured[0].add_entry(8, 0, -1, b"guarded record")
    return secured


async def _connect(address: BookieAddress, ticket: ReadTicket) -> RawBookieClient:
    client = await connect_raw(address)
    handshake = ClientHandshake(ticket)
    challenge = await client.request(handshake.hello())
    assert isinstance(challenge, AuthResponse)
    done = await client.request(handshake.prove(challenge))
    assert isinstance(done, AuthResponse)
    handshake.finish(done)
    return client


async def test_a_ticket_reads_its_ledgers_and_nothing_else(
        bookie: tuple[MemoryBookieStorage, BookieAddress]) -> None:  # fmt: skip
    storage, address = bookie
    client = await _connect(address, issue_ticket(SECRET.key, "alice", {7}, ttl_s=600))
    assert await client.request(ReadEntryRequest(1, 7, 0)) == ReadEntryResponse(
        1, Status.OK, 7, 0, -1, b"secret record")  # fmt: skip
    assert getattr(await client.request(ReadLacRequest(2, 7)), "status", None) is Status.OK
    batch = await client.request(ReadEntriesRequest(3, 7, 0, 10, 1 << 20))
    assert getattr(batch, "bodies", None) == (b"secret record",)
    outside: tuple[Message, ...] = (
            ReadEntryRequest(0, 8, 0),                       # another topic's ledger
            ReadEntriesRequest(0, 8, 0, 10, 1 << 20),
            ReadLacRequest(0, 8),
            ReadEntryRequest(0, 7, -1, fence=True),          # fencing a live writer
            AddEntryRequest(0, 7, 1, 0, False, b"forged"),   # writing
            WriteLacRequest(0, 7, 0),
            BookieInfoRequest(0))  # fmt: skip
    for rid, request in enumerate(outside, start=3):
        response = await client.request(dataclasses.replace(request, request_id=rid))
        assert getattr(response, "status", None) is Status.UNAUTHORIZED, request
    # the connection stays usable for what the ticket allows
    assert getattr(await client.request(ReadEntryRequest(20, 7, 0)), "status", None) \
        is Status.OK  # fmt: skip
    assert not storage.is_fenced(7) and storage.last_entry_id(7) == 0


async def test_forged_tampered_and_expired_tickets_do_not_authenticate(
        bookie: tuple[MemoryBookieStorage, BookieAddress]) -> None:  # fmt: skip
    _, address = bookie
    forged = issue_ticket(OTHER.key, "alice", {8}, ttl_s=600)  # another cluster's secret
    with pytest.raises(BookieAuthError, match="could not prove"):
        await _connect(address, forged)
    granted = issue_ticket(SECRET.key, "alice", {7}, ttl_s=600)
    widened = encode_body(TicketScope("alice", granted.scope.expires_ms, frozenset({7, 8})))
    with pytest.raises(BookieAuthError, match="could not prove"):
        await _connect(address, ReadTicket(widened, granted.key))  # the key no longer fits
    expired = issue_ticket(SECRET.key, "alice", {7}, ttl_s=1,
                           now_ms=int(time.time() * 1000) - 5_000)  # fmt: skip
    with pytest.raises(BookieAuthError, match="UNAUTHORIZED"):
        await _connect(address, expired)


async def test_a_connection_stops_reading_when_its_ticket_expires(
        bookie: tuple[MemoryBookieStorage, BookieAddress]) -> None:  # fmt: skip
    _, address = bookie
    short = issue_ticket(SECRET.key, "alice", {7}, ttl_s=0.6)
    client = await _connect(address, short)
    while short.scope.expires_ms > time.time() * 1000:  # noqa: ASYNC110 - wall clock expiry
        await trio.sleep(0.1)
    response = await client.request(ReadEntryRequest(1, 7, 0))
    assert getattr(response, "status", None) is Status.UNAUTHORIZED


def test_a_ticket_survives_its_text_form_and_never_shows_its_key() -> None:
    ticket = issue_ticket(SECRET.key, "alice", {3, 1, 2}, ttl_s=60)
    again = ReadTicket.decode(ticket.encode())
    assert again == ticket and again.scope.ledgers == {1, 2, 3}
    assert again.scope.principal == "alice"
    assert ticket.key.hex() not in repr(ticket)
    with pytest.raises(TicketError):
        ReadTicket.decode("not a ticket")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_made_up_ticket_bodies_are_refused_without_a_crash(body: bytes) -> None:
    try:
        decode_body(body)
    except TicketError:
        pass
    handshake = BookieHandshake(SECRET)
    response = handshake.answer(AuthRequest(1, 3, b"n" * 32 + body))
    if response.status is Status.OK:  # a well-formed body: still needs the proof of its key
        assert not handshake.authenticated
        assert handshake.answer(AuthRequest(2, 2, b"p" * 32)).status is Status.UNAUTHORIZED
    assert not handshake.authenticated
