"""Test helpers for the bookie server tests: a raw wire client and a served bookie record."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from ledger_backend.bookie.frame_decoder import FrameDecoder
from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.protocol import BookieAddress, Message, encode


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll a condition that no event announces (e.g. storage.adds_in_flight)."""
    with trio.fail_after(timeout_s):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.001)


class RawBookieClient:
    """A minimal test client: sends frames or raw bytes, receives decoded responses."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._decoder = FrameDecoder(accept="responses")
        self._pending: list[Message] = []

    async def send(self, *messages: Message) -> None:
        await self.stream.send_all(b"".join(encode(m) for m in messages))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive(self, count: int = 1, timeout_s: float = 5.0) -> list[Message]:
        with trio.fail_after(timeout_s):
            while len(self._pending) < count:
                data = await self.stream.receive_some(1 << 16)
                if not data:
                    raise EOFError(f"connection closed after {len(self._pending)} responses")
                self._pending.extend(self._decoder.feed(data))
        out, self._pending = self._pending[:count], self._pending[count:]
        return out

    async def request(self, message: Message) -> Message:
        await self.send(message)
        (response,) = await self.receive()
        return response

    async def closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """True once the server closed the connection (EOF or reset)."""
        with trio.fail_after(timeout_s):
            while True:
                try:
                    data = await self.stream.receive_some(1 << 16)
                except trio.BrokenResourceError:
                    return True
                if not data:
                    return True

    async def aclose(self) -> None:
        await self.stream.aclose()


@dataclass
class ServedBookie:
    storage: MemoryBookieStorage
    address: BookieAddress


Connect = Callable[[], Awaitable[RawBookieClient]]
