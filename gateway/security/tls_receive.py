"""Receiving from a TLS stream every record that has already arrived, in one call.

trio's `SSLStream.receive_some` decrypts at most one TLS record (16 KiB of plaintext) per call,
however many bytes the caller asks for and however many records its buffer already holds; a
256 KiB produce request then takes sixteen trips through the read loop and Trio's scheduler.
`receive_ready(stream, max_bytes)` awaits one `receive_some` as usual, then decrypts, without
waiting, every further record that is already complete in the stream's incoming buffer, up to
max_bytes.

Why this is safe: the extra reads are plain synchronous `SSLObject.read` calls between two
awaits, so no other task can interleave with them (trio's rule for its SSLObject). They stop at
the first record that is not complete yet (SSLWantReadError: left for the next receive_some,
which waits for the rest from the socket), at a clean close (b"": the next receive_some
reports the end), and at any other SSL error (left for trio, whose next receive_some raises
it as BrokenResourceError). Whatever OpenSSL queues to send meanwhile (an answer to a TLS 1.3
KeyUpdate) stays in trio's outgoing buffer, which trio's next receive or send flushes, in
order. Renegotiation, the one exchange that could need both directions mid-read, is switched
off on our server contexts (gateway/security/setup.py).

The extra reads use trio's `_ssl_object` attribute (trio 0.22 to 0.35 at least); on a trio
without it, `receive_ready` is `receive_some` (tests/security/test_tls_receive.py fails then,
so an upgrade cannot lose the gain silently). This module must never await between the
extra reads, nor read past max_bytes.
"""

from __future__ import annotations

import ssl
from typing import Any

import trio

__all__ = ["drains_ready_records", "receive_ready"]


def _ssl_object(stream: trio.SSLStream[Any]) -> ssl.SSLObject | None:
    ssl_object = getattr(stream, "_ssl_object", None)
    return ssl_object if isinstance(ssl_object, ssl.SSLObject) else None


def drains_ready_records(stream: trio.SSLStream[Any]) -> bool:
    """True when receive_ready can read past the first record on this trio version."""
    return _ssl_object(stream) is not None


async def receive_ready(stream: trio.SSLStream[Any], max_bytes: int) -> bytes | bytearray:
    """receive_some(max_bytes), plus the records already buffered behind the first one."""
    first = await stream.receive_some(max_bytes)
    ssl_object = _ssl_object(stream)
    if not first or ssl_object is None or len(first) >= max_bytes:
        return first
    chunks = [first]
    total = len(first)
    while total < max_bytes:
        try:
            more = ssl_object.read(max_bytes - total)
        except ssl.SSLError:  # SSLWantReadError: the next record is incomplete; others: trio's
            break
        if not more:  # close_notify: the next receive_some returns b""
            break
        chunks.append(more)
        total += len(more)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
