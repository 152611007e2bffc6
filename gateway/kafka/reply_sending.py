"""Sending a Kafka connection's answers: the reply slots and the socket writes.

A Reply is one request's place in its connection's response order (its buffers once done, or a
close). ``send_buffers`` writes one batch of answer buffers: on plain TCP with as few vectored
``sendmsg`` calls as the kernel allows (stored record batches go out uncopied), on TLS joined
into sends of about ``_TLS_SEND_BYTES`` so coalescing never builds one copy of many large
answers. The order of replies and the write timeout are the listener's (listener.py).

This module must never decode or encode Kafka messages, nor decide when a connection closes.
"""

from __future__ import annotations

import os
from typing import Any

import trio

__all__ = ["Reply", "buffer_size", "send_buffers", "sendmsg_all"]

# iovecs per sendmsg call (Linux IOV_MAX is 1024)
_MAX_IOVECS = 512
_TLS_SEND_BYTES = 1 << 20


class Reply:
    """The slot of one request in its connection's response order."""

    __slots__ = ("done", "frame", "close", "fetch_slot")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.frame: list[Any] | None = None  # the answer's buffers, None: no answer
        self.close = False
        self.fetch_slot: trio.Semaphore | None = None  # released once the answer is written

    def finish(self, frame: list[Any] | None, *, close: bool = False) -> None:
        self.frame = frame
        self.close = close
        self.done.set()


def buffer_size(buffer: Any) -> int:
    return buffer.nbytes if type(buffer) is memoryview else len(buffer)


def _writev_now(sock: trio.socket.SocketType, batch: list[Any]) -> int:
    """Bytes of `batch` the socket takes now, without yielding: trio's sendmsg yields to the
    scheduler after a send that succeeded at once, one more event-loop turn per answer."""
    fd = sock.fileno()  # -1 once closed: never a descriptor number reused since
    if fd < 0:
        raise trio.ClosedResourceError("connection closed")
    try:
        return os.writev(fd, batch)
    except BlockingIOError:
        return 0


async def sendmsg_all(sock: trio.socket.SocketType, buffers: list[Any]) -> None:
    """Send every buffer, in order, with as few vectored `sendmsg` calls as the kernel allows;
    the first write is tried without a scheduler turn (a lone answer usually fits)."""
    start = 0
    count = len(buffers)
    at_once = True
    while start < count:
        batch = buffers[start : start + _MAX_IOVECS]
        try:
            if at_once:
                at_once = False
                sent = _writev_now(sock, batch)
            else:
                sent = await sock.sendmsg(batch)
        except OSError as exc:
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
        for buffer in batch:
            size = buffer_size(buffer)
            if sent < size:
                if sent:
                    buffers[start] = memoryview(buffer)[sent:]
                break
            sent -= size
            start += 1


async def send_buffers(stream: trio.abc.Stream, sock: trio.socket.SocketType | None,
                       buffers: list[Any]) -> None:
    """Send one write's buffers: vectored on a plain socket, joined in sends of about
    _TLS_SEND_BYTES on TLS (``sock`` None)."""
    if sock is not None:
        await sendmsg_all(sock, buffers)
        return
    # TLS: no vectored send; join small buffers into sends of about _TLS_SEND_BYTES, so
    # coalescing never builds one copy of many large answers.
    pending: list[Any] = []
    pending_bytes = 0
    for buffer in buffers:
        size = buffer_size(buffer)
        if pending and pending_bytes + size > _TLS_SEND_BYTES:
            await stream.send_all(pending[0] if len(pending) == 1 else b"".join(pending))
            pending, pending_bytes = [], 0
        pending.append(buffer)
        pending_bytes += size
    if len(pending) == 1:
        await stream.send_all(pending[0])
    elif pending:
        await stream.send_all(b"".join(pending))
