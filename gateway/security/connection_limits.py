"""How many connections a listener holds: Kafka's max.connections and max.connections.per.ip.

`ConnectionLimits.admitted(host)` is a context manager that refuses (ConnectionRefused, with
the reason) or counts the connection until the block ends, from accept to close.  A limit of
0 means none.  The Kafka listener (gateway/kafka/admission.py) and the RocketMQ 4.x and 5.x
listeners each keep one.

This module must never touch a socket: the listener closes what is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class ConnectionRefused(Exception):
    """A limit is reached; the message says which."""


class ConnectionLimits:
    def __init__(self, max_connections: int = 0, max_connections_per_ip: int = 0) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.open = 0
        self.per_ip: dict[str, int] = {}
        self.refused = 0

    def _refusal(self, host: str) -> str | None:
        if self.max_connections and self.open >= self.max_connections:
            return f"max_connections={self.max_connections} reached"
        if self.max_connections_per_ip and \
                self.per_ip.get(host, 0) >= self.max_connections_per_ip:
            return f"max_connections_per_ip={self.max_connections_per_ip} reached for {host}"
        return None

    @contextmanager
    def admitted(self, host: str) -> Iterator[None]:
        refusal = self._refusal(host)
        if refusal is not None:
            self.refused += 1
            raise ConnectionRefused(refusal)
        self.open += 1
        self.per_ip[host] = self.per_ip.get(host, 0) + 1
        try:
            yield
        finally:
            self.open -= 1
            left = self.per_ip[host] - 1
            if left:
                self.per_ip[host] = left
            else:
                del self.per_ip[host]
