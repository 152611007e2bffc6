"""The connections of one ledger client: a pool of one connection per bookie address.

A bookie served by this process is reached through a LocalBookieConnection when the pool was
made with `local_bookies=True`, every other one over TCP through a BookieConnection (both in
bookie_client.py); the pool also asks a bookie for its LAC, plainly or by long poll.
"""

from __future__ import annotations

import math
import ssl

import trio

from ledger_backend.bookie import local_bookies
from ledger_backend.bookie.auth import BookieCredential
from ledger_backend.bookie.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    ReadEntryRequest,
    ReadLacRequest,
    Status,
)
from ledger_backend.client.bookie_client import (
    BookieConnection,
    LocalBookieConnection,
    check_status,
)


class BookieClientPool:
    """The connections of one BookKeeper client, one per bookie address.

    With `local_bookies=True`, bookies served by this very process are reached in-process
    (see ledger_backend/bookie/local_bookies.py); all others over TCP.
    """

    def __init__(self, nursery: trio.Nursery, *, timeout_s: float,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 local_bookies: bool = False,
                 secret: BookieCredential | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 batch_reads: bool = True) -> None:  # fmt: skip
        self._nursery = nursery
        self._batch_reads = batch_reads  # False: every connection starts without batch reads
        self._secret = secret
        self._ssl_context = ssl_context
        self._timeout_s = timeout_s
        self._max_frame_bytes = max_frame_bytes
        self._local = local_bookies
        self._connections: dict[str, BookieConnection | LocalBookieConnection] = {}

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

    def connection(self, address: str) -> BookieConnection | LocalBookieConnection:
        conn = self._connections.get(address)
        if conn is None:
            if self._local and local_bookies.lookup(address) is not None:
                conn = LocalBookieConnection(address, self._nursery, timeout_s=self._timeout_s)
            else:
                conn = BookieConnection(address, self._nursery, timeout_s=self._timeout_s,
                                        max_frame_bytes=self._max_frame_bytes,
                                        secret=self._secret,
                                        ssl_context=self._ssl_context)  # fmt: skip
            conn.batch_reads = self._batch_reads
            self._connections[address] = conn
        return conn

    async def read_lac(self, address: str, ledger_id: int) -> int:
        """The bookie's LAC for the ledger (-1 if it knows nothing of it)."""
        response = await self.connection(address).request(
            lambda rid: ReadLacRequest(rid, ledger_id)
        )
        if response.status in (Status.NO_SUCH_LEDGER, Status.NO_SUCH_ENTRY):
            return -1
        check_status(response, address)
        assert hasattr(response, "lac")
        return int(response.lac)

    async def long_poll_lac(self, address: str, ledger_id: int, previous: int,
                            timeout_s: float) -> int:  # fmt: skip
        """Wait on the bookie until its LAC exceeds `previous` >= 0 (at timeout: returns
        `previous`)."""
        if previous < 0:
            raise ValueError("a long poll needs previous >= 0; poll read_lac instead")
        timeout_s = min(timeout_s, 3600.0) if math.isfinite(timeout_s) else 3600.0
        timeout_ms = max(1, int(timeout_s * 1000))
        response = await self.connection(address).request(
            lambda rid: ReadEntryRequest(rid, ledger_id, -1, False, previous, timeout_ms),
            timeout_s=timeout_s + self._timeout_s,
        )
        if response.status in (Status.TIMEOUT, Status.NO_SUCH_LEDGER, Status.NO_SUCH_ENTRY):
            return previous
        check_status(response, address)
        assert hasattr(response, "lac")
        return int(response.lac)

    async def close(self) -> None:
        for conn in list(self._connections.values()):
            await conn.close()
        self._connections.clear()
