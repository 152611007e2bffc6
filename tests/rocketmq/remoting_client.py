"""A tiny raw RocketMQ remoting client for tests (Trio): send a command, get the answer."""

from __future__ import annotations

import trio

from protocols.rocketmq.codec import (
    SERIALIZE_JSON,
    FrameReader,
    RemotingCommand,
    decode_command,
    encode_command,
    make_request,
)


class RawClient:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.reader = FrameReader()
        self.pending: list[RemotingCommand] = []

    @classmethod
    async def connect(cls, addr: str) -> RawClient:
        host, port = addr.rsplit(":", 1)
        return cls(await trio.open_tcp_stream(host, int(port)))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive(self, wait_s: float = 5.0) -> RemotingCommand | None:
        """The next command from the server, or None if the connection closed."""
        with trio.fail_after(wait_s):
            while not self.pending:
                data = await self.stream.receive_some(1 << 20)
                if not data:
                    return None
                self.pending += [decode_command(f) for f in self.reader.feed(data)]
        return self.pending.pop(0)

    async def call(self, code: int, ext: dict[str, object] | None = None, body: bytes = b"",
                   serialize_type: int = SERIALIZE_JSON, wait_s: float = 5.0) -> RemotingCommand:
        request = make_request(code, ext, body, serialize_type=serialize_type)
        await self.stream.send_all(encode_command(request))
        while True:
            answer = await self.receive(wait_s)
            assert answer is not None, "connection closed"
            if answer.is_response and answer.opaque == request.opaque:
                return answer

    async def aclose(self) -> None:
        await self.stream.aclose()
