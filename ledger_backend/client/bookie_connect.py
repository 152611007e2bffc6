"""Opening one connection from a ledger client to a bookie: TCP, then TLS, then the secret.

`open_bookie_stream` returns a stream on which requests may be written at once, or raises
BookieUnavailableError (with one WARNING line for a refused TLS or AUTH handshake). The
decoder it returns has read the handshake's responses and keeps any bytes that followed them.
Every step is bounded by the client timeout. This module must never write a request before
the handshakes succeeded, and never log the secret.
"""

from __future__ import annotations

import logging
import ssl

import trio

from ledger_backend.bookie.auth import BookieAuthError, BookieCredential, ClientHandshake
from ledger_backend.bookie.frame_decoder import FrameDecoder
from ledger_backend.bookie.protocol import (
    AuthResponse,
    ProtocolError,
    Request,
    encode,
)
from ledger_backend.client.errors import BookieUnavailableError

log = logging.getLogger("ledger_backend.client.bookie_client")

_RECEIVE_BYTES = 64 * 1024
_STREAM_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError)


async def open_bookie_stream(
    address: str, host: str, port: int, *, timeout_s: float, max_frame_bytes: int,
    ssl_context: ssl.SSLContext | None, secret: BookieCredential | None,
) -> tuple[trio.abc.Stream, FrameDecoder]:  # fmt: skip
    try:
        with trio.fail_after(timeout_s):
            tcp = await trio.open_tcp_stream(host, port)
    except (OSError, trio.TooSlowError) as exc:
        raise BookieUnavailableError(f"cannot connect to {address}: {exc}") from None
    stream: trio.abc.Stream = tcp
    if ssl_context is not None:
        stream = trio.SSLStream(tcp, ssl_context, server_hostname=host)
        try:
            with trio.fail_after(timeout_s):
                await stream.do_handshake()
        except _STREAM_ERRORS as exc:
            log.warning("bookie %s: TLS handshake failed: %s", address, exc.__cause__ or exc)
            await trio.aclose_forcefully(tcp)
            raise BookieUnavailableError(f"TLS handshake with bookie {address} failed: "
                                         f"{exc.__cause__ or exc}") from None  # fmt: skip
    decoder = FrameDecoder(max_frame_bytes, accept="responses")
    if secret is not None:
        try:
            with trio.fail_after(timeout_s):
                await _authenticate(stream, decoder, secret)
        except (BookieAuthError, ProtocolError, *_STREAM_ERRORS) as exc:
            log.warning("bookie %s: authentication failed: %s", address, exc)
            await trio.aclose_forcefully(stream)
            raise BookieUnavailableError(
                f"cannot authenticate to bookie {address}: {exc}") from None
    return stream, decoder


async def _authenticate(stream: trio.abc.Stream, decoder: FrameDecoder,
                        secret: BookieCredential) -> None:  # fmt: skip
    """The AUTH handshake (bookie/auth.py); BookieAuthError if the bookie refuses it."""
    handshake = ClientHandshake(secret)

    async def exchange(request: Request) -> AuthResponse:
        await stream.send_all(encode(request))
        while True:
            data = await stream.receive_some(_RECEIVE_BYTES)
            if not data:
                raise BookieAuthError("the bookie closed the connection")
            messages = decoder.feed(data)
            if messages:
                break
        if len(messages) != 1 or type(messages[0]) is not AuthResponse:
            raise BookieAuthError(f"unexpected answer to AUTH: {messages!r:.200}")
        return messages[0]

    answer = await exchange(handshake.hello())
    handshake.finish(await exchange(handshake.prove(answer)))
