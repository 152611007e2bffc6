"""receive_ready (gateway/security/tls_receive.py): one call returns every TLS record already
in the stream's buffer, not only the first; an incomplete record is left for the next call
(which waits for its rest), nothing is lost, reordered or read past max_bytes, and a clean
close still reads as b"". In-process: a trio SSLStream server over memory streams whose
client-to-server bytes the test moves by hand; the client is a plain ssl.SSLObject."""

from __future__ import annotations

import os
import ssl

import trio
import trio.testing

from gateway.security.tls_receive import drains_ready_records, receive_ready

RECORD = 16384  # TLS plaintext record limit


class Pair:
    """A handshaken server SSLStream and client SSLObject; client bytes reach the server
    only through `deliver`."""

    def __init__(self, server: trio.SSLStream[trio.StapledStream], client: ssl.SSLObject,
                 client_out: ssl.MemoryBIO, client_in: ssl.MemoryBIO,
                 to_server: trio.testing.MemoryReceiveStream,
                 from_server: trio.testing.MemorySendStream) -> None:  # fmt: skip
        self.server, self.client = server, client
        self._client_out, self._client_in = client_out, client_in
        self._to_server, self._from_server = to_server, from_server

    def encrypt(self, data: bytes) -> bytes:
        self.client.write(data)
        return self._client_out.read()

    def deliver(self, ciphertext: bytes) -> None:
        self._to_server.put_data(ciphertext)

    def close_client(self) -> None:
        try:
            self.client.unwrap()
        except ssl.SSLWantReadError:
            pass
        self.deliver(self._client_out.read())


async def _pair(contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> Pair:
    server_context, client_context = contexts
    to_server = trio.testing.MemoryReceiveStream()
    from_server = trio.testing.MemorySendStream()
    server = trio.SSLStream(trio.StapledStream(from_server, to_server), server_context,
                            server_side=True)
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(client_in, client_out, server_hostname="localhost")
    pair = Pair(server, client, client_out, client_in, to_server, from_server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        while True:
            try:
                client.do_handshake()
                break
            except ssl.SSLWantReadError:
                pair.deliver(client_out.read())
                await trio.testing.wait_all_tasks_blocked()
                client_in.write(from_server.get_data_nowait())
        pair.deliver(client_out.read())
    return pair


async def test_one_call_reads_every_buffered_record(contexts) -> None:  # type: ignore[no-untyped-def]
    pair = await _pair(contexts)
    assert drains_ready_records(pair.server)  # trio still has what receive_ready reads
    payload = os.urandom(10 * RECORD + 123)
    pair.deliver(pair.encrypt(payload))
    assert await receive_ready(pair.server, 1 << 20) == payload  # eleven records, one call

    pair.deliver(pair.encrypt(payload))
    plain = await pair.server.receive_some(1 << 20)  # what trio alone gives: one record
    assert len(plain) == RECORD
    assert plain + await receive_ready(pair.server, 1 << 20) == payload


async def test_max_bytes_and_an_incomplete_record_are_respected(contexts) -> None:  # type: ignore[no-untyped-def]
    pair = await _pair(contexts)
    payload = os.urandom(4 * RECORD)
    ciphertext = pair.encrypt(payload)
    cut = len(ciphertext) * 5 // 8  # two whole records and part of the third
    pair.deliver(ciphertext[:cut])
    first = await receive_ready(pair.server, 1 << 20)
    assert first == payload[: 2 * RECORD]  # the partial record is not waited for here
    with trio.move_on_after(0.2) as waiting:  # the next call waits for the record's rest
        await receive_ready(pair.server, 1 << 20)
    assert waiting.cancelled_caught
    pair.deliver(ciphertext[cut:])
    rest = b""
    while len(first) + len(rest) < len(payload):
        more = await receive_ready(pair.server, RECORD + 10)
        assert 0 < len(more) <= RECORD + 10  # never past max_bytes
        rest += more
    assert first + rest == payload


async def test_a_clean_close_still_reads_as_the_end(contexts) -> None:  # type: ignore[no-untyped-def]
    pair = await _pair(contexts)
    pair.deliver(pair.encrypt(b"last words"))
    pair.close_client()
    assert await receive_ready(pair.server, 1 << 20) == b"last words"
    assert await receive_ready(pair.server, 1 << 20) == b""


def test_server_contexts_refuse_renegotiation(contexts) -> None:  # type: ignore[no-untyped-def]
    assert contexts[0].options & ssl.OP_NO_RENEGOTIATION
