"""A minimal Kafka wire client for the server tests: the project's codec over a Trio socket.

It sends requests with `encode_request`, reads frames with `FrameReader` and decodes answers
with `decode_response`, so every handler can be driven over real TCP with exact versions.
Pipelining is explicit: `send` returns the correlation id, `receive` takes the next answer.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import trio

from protocols.kafka.codec import RequestHeader, decode_response, encode_request
from protocols.kafka.framing import FrameReader

RECEIVE_TIMEOUT_S = 10.0


class ConnectionClosed(Exception):
    """The server closed the connection."""


class WireClient:
    def __init__(self, stream: trio.SocketStream, client_id: str | None = "wire-test") -> None:
        self.stream = stream
        self.client_id = client_id
        self._reader = FrameReader()
        self._frames: deque[bytes] = deque()
        self._next_correlation_id = 1
        self._sent: deque[tuple[int, int, int]] = deque()  # (correlation id, api key, version)

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> WireClient:
        return cls(await trio.open_tcp_stream(host, port))

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> WireClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def send(self, api_key: int, version: int, body: dict[str, Any],
                   *, expect_response: bool = True) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        header = RequestHeader(api_key, version, correlation_id, self.client_id)
        await self.stream.send_all(encode_request(header, body))
        if expect_response:
            self._sent.append((correlation_id, api_key, version))
        return correlation_id

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive_frame(self, timeout_s: float = RECEIVE_TIMEOUT_S) -> bytes:
        with trio.fail_after(timeout_s):
            while not self._frames:
                data = await self.stream.receive_some(65536)
                if not data:
                    raise ConnectionClosed()
                self._frames.extend(self._reader.feed(data))
        return self._frames.popleft()

    async def receive(self, timeout_s: float = RECEIVE_TIMEOUT_S) -> tuple[int, dict[str, Any]]:
        frame = await self.receive_frame(timeout_s)
        correlation_id, api_key, version = self._sent.popleft()
        got_id, body = decode_response(api_key, version, frame)
        assert got_id == correlation_id, f"answer {got_id} out of order, expected {correlation_id}"
        return got_id, body

    async def request(self, api_key: int, version: int, body: dict[str, Any],
                      timeout_s: float = RECEIVE_TIMEOUT_S) -> dict[str, Any]:
        await self.send(api_key, version, body)
        _, answer = await self.receive(timeout_s)
        return answer

    async def closed_by_server(self, timeout_s: float = 5.0) -> bool:
        """True once the server closes the connection (EOF or reset) within `timeout_s`."""
        with trio.move_on_after(timeout_s):
            try:
                while True:
                    if not await self.stream.receive_some(65536):
                        return True
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return True
        return False
