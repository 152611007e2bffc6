"""Broker-to-broker requests over the Kafka protocol, for what a cluster broker must ask the
owner of a partition to do (a transaction coordinator's WriteTxnMarkers, the offsets of a
committed transaction for a group coordinator on another broker).

One connection per peer address, reused; one request at a time on it (the callers are few and
the answers small), each with a timeout.  A connection that failed or timed out is dropped, so
the next request reconnects (the peer may have restarted on the same address).

This module must never decide *where* a request goes (callers look owners up in the ownership
service) nor retry: a failed request raises, and the caller's own retry loop decides.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import trio

from protocols.kafka.codec import RequestHeader, decode_response, encode_request
from protocols.kafka.errors import ErrorCode, KafkaProtocolError, RequestTimedOutError
from protocols.kafka.framing import FrameReader

log = logging.getLogger("ledgerwire.peers")

PEER_REQUEST_TIMEOUT_S = 5.0  # markers take milliseconds; a paused peer must not stall EndTxn


class PeerUnavailableError(KafkaProtocolError):
    """The peer broker could not be reached or did not answer (retriable by the caller)."""

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


@dataclass
class _Connection:
    stream: trio.SocketStream
    reader: FrameReader = field(default_factory=FrameReader)
    lock: trio.Lock = field(default_factory=trio.Lock)
    next_correlation_id: int = 1


class PeerClient:
    """Requests to other brokers of the cluster (see the module docstring)."""

    def __init__(self, client_id: str, timeout_s: float = PEER_REQUEST_TIMEOUT_S) -> None:
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._connecting: dict[tuple[str, int], trio.Lock] = {}

    async def request(self, host: str, port: int, api_key: int, version: int,
                      body: dict[str, Any]) -> dict[str, Any]:
        """Send one request to host:port and return the answer's body."""
        address = (host, port)
        try:
            with trio.fail_after(self.timeout_s):
                connection = await self._connection(address)
                async with connection.lock:
                    try:
                        return await self._exchange(connection, api_key, version, body)
                    except trio.Cancelled:  # half a request or an unread answer: unusable
                        await self._drop(address)
                        raise
        except trio.TooSlowError as exc:
            await self._drop(address)
            raise RequestTimedOutError(f"broker {host}:{port} did not answer") from exc
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, EOFError) as exc:
            await self._drop(address)
            raise PeerUnavailableError(f"broker {host}:{port}: {exc!r}") from exc

    async def _connection(self, address: tuple[str, int]) -> _Connection:
        async with self._connecting.setdefault(address, trio.Lock()):
            connection = self._connections.get(address)
            if connection is None:
                stream = await trio.open_tcp_stream(*address)
                connection = self._connections[address] = _Connection(stream)
            return connection

    async def _exchange(self, connection: _Connection, api_key: int, version: int,
                        body: dict[str, Any]) -> dict[str, Any]:
        correlation_id = connection.next_correlation_id
        connection.next_correlation_id += 1
        header = RequestHeader(api_key, version, correlation_id, self.client_id)
        await connection.stream.send_all(encode_request(header, body))
        frames: list[Any] = []
        while not frames:
            data = await connection.stream.receive_some(65536)
            if not data:
                raise EOFError("connection closed by the peer")
            frames = connection.reader.feed(data)
        if len(frames) != 1:  # one request in flight: anything more is a broken stream
            raise EOFError(f"{len(frames)} answers to one request")
        got, answer = decode_response(api_key, version, frames[0])
        if got != correlation_id:
            raise EOFError(f"answer {got} to request {correlation_id}")
        return answer

    async def _drop(self, address: tuple[str, int]) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            with trio.CancelScope(shield=True):
                await connection.stream.aclose()

    async def aclose(self) -> None:
        for address in list(self._connections):
            await self._drop(address)
