"""The slice of the ledger client (contract C) that managed ledgers use, as typing Protocols.

Both ledger_backend.client.bookkeeper.BookKeeper and the in-memory twin
ledger_backend.client.memory.MemoryBookKeeper satisfy these. Declaring the slice here keeps
the managed ledger honest about what it relies on; this module must never hold behaviour.
"""

from __future__ import annotations

from typing import Any, Protocol


class LedgerMetadataView(Protocol):
    @property
    def last_entry_id(self) -> int: ...

    @property
    def length(self) -> int: ...


class WriteHandleLike(Protocol):
    ledger_id: int

    @property
    def last_add_confirmed(self) -> int: ...

    async def append(self, data: bytes) -> int: ...

    async def close(self) -> None: ...


class ReadHandleLike(Protocol):
    ledger_id: int

    @property
    def metadata(self) -> Any: ...  # LedgerMetadataView: last_entry_id, length, state

    @property
    def last_add_confirmed(self) -> int: ...

    async def read(self, first: int, last: int) -> list[bytes]: ...

    async def read_lac(self) -> int: ...

    async def close(self) -> None: ...


class BookKeeperLike(Protocol):
    async def create_ledger(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        custom_metadata: dict[str, bytes] | None = None,
    ) -> Any: ...  # WriteHandleLike

    async def prepare_ledger(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        custom_metadata: dict[str, bytes] | None = None,
        *,
        above: int = 0,
    ) -> Any: ...  # PreparedLedger: ledger_id, metadata, ops (to commit in the caller's multi)

    def adopt_ledger(self, prepared: Any) -> Any: ...  # WriteHandleLike, once ops committed

    async def open_ledger(self, ledger_id: int, *, recovery: bool) -> Any: ...  # ReadHandleLike

    async def delete_ledger(self, ledger_id: int) -> None: ...
