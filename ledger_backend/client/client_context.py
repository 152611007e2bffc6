"""What ledger handles share with their BookKeeper: metadata access, connections, placement.

`ClientContext` reads and compare-and-sets ledger metadata (every store call bounded by the
client timeout, store errors mapped to ledger errors), lists registered bookies, and carries the
bookie connection pool, the placement policy, the client's nursery and its write handles'
timers. It must never write
ledger metadata without the version it read (no blind sets).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import trio

from ledger_backend.bookie.master_key import derive_mac_key, derive_master_key
from ledger_backend.client.bookie_pool import BookieClientPool
from ledger_backend.client.errors import (
    BKTimeoutError,
    DigestMismatchError,
    LedgerMetadataError,
    MetadataStoreError,
    NoSuchLedgerError,
)
from ledger_backend.client.handle_timers import HandleTimers
from ledger_backend.client.ledger_metadata import (
    AVAILABLE_BOOKIES_PATH,
    DIGEST_TYPE_CRC32C,
    DIGEST_TYPE_HMAC_SHA256,
    LEDGERS_PATH,
    LedgerMetadata,
    ledger_id_from_node_name,
    ledger_path,
)
from ledger_backend.client.placement import PlacementPolicy

if TYPE_CHECKING:
    from ledger_backend.metadata.store import MetadataStore, Op, OpResult

T = TypeVar("T")


class MetadataVersionConflict(Exception):
    """The CAS lost: somebody changed the ledger's metadata since we read it (internal)."""


@dataclass
class ClientContext:
    store: MetadataStore
    pool: BookieClientPool
    placement: PlacementPolicy
    nursery: trio.Nursery
    timeout_s: float
    # A writer whose adds paused this long sends its LAC to the bookies (0: never), so that
    # readers of the open ledger see the last entry (see WriteHandle).
    explicit_lac_delay_s: float = 0.2
    # the password of ledgers this client creates, and recovers (bookie/master_key.py)
    ledger_password: bytes | None = None
    # every write handle's deadline watchdog and LAC sender (handle_timers.py)
    timers: HandleTimers = field(init=False)

    def __post_init__(self) -> None:
        self.timers = HandleTimers(self.nursery, self.explicit_lac_delay_s)

    def master_key(self, metadata: LedgerMetadata) -> bytes:
        """The key this client sends for `metadata`'s ledger on adds and fencing reads: b""
        for a ledger without a password (or a client without one: the bookie refuses)."""
        if not metadata.password_hash or self.ledger_password is None:
            return b""
        return derive_master_key(self.ledger_password, metadata.password_salt)

    def mac_key(self, metadata: LedgerMetadata) -> bytes | None:
        """The key of `metadata`'s entry MACs; None for a ledger with CRC digests.
        DigestMismatchError when the ledger's entries carry MACs this client cannot check."""
        if metadata.digest_type == DIGEST_TYPE_CRC32C:
            return None
        if metadata.digest_type != DIGEST_TYPE_HMAC_SHA256 or not metadata.password_salt:
            raise DigestMismatchError(f"unknown entry digest type {metadata.digest_type!r}")
        if self.ledger_password is None:
            raise DigestMismatchError("this ledger's entries carry MACs: reading it needs the "
                                      "ledger password (storage.ledger_password_file)")
        return derive_mac_key(self.ledger_password, metadata.password_salt)

    async def _bounded(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run a store call within the client timeout. Errors a caller handles (no node, node
        exists, bad version) pass through; the rest become LedgerErrors."""
        from ledger_backend.metadata.store import (
            BadVersionError,
            MetadataError,
            MetadataUnavailableError,
            NodeExistsError,
            NoNodeError,
        )

        try:
            with trio.fail_after(self.timeout_s):
                return await call()
        except trio.TooSlowError:
            raise BKTimeoutError(f"metadata store did not answer {what} in time") from None
        except MetadataUnavailableError as exc:
            raise BKTimeoutError(f"metadata store unavailable during {what}: {exc}") from exc
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except MetadataError as exc:
            raise MetadataStoreError(f"metadata store failed during {what}: {exc!r}") from exc

    async def next_ledger_id(self, counter_path: str) -> int:
        return await self._bounded("next_id", lambda: self.store.next_id(counter_path))

    async def available_bookies(self) -> list[str]:
        from ledger_backend.metadata.store import NoNodeError

        try:
            return await self._bounded(
                "list bookies", lambda: self.store.children(AVAILABLE_BOOKIES_PATH)
            )
        except NoNodeError:
            return []

    async def create_metadata(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        from ledger_backend.metadata.store import NodeExistsError

        try:
            await self._bounded(
                "create ledger",
                lambda: self.store.create(
                    ledger_path(ledger_id), metadata.to_json_bytes(), make_parents=True
                ),
            )
        except NodeExistsError as exc:
            raise LedgerMetadataError(f"ledger {ledger_id} already exists") from exc
        return 0

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        from ledger_backend.metadata.store import NoNodeError

        try:
            data, stat = await self._bounded(
                "read ledger", lambda: self.store.get(ledger_path(ledger_id))
            )
        except NoNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None
        return LedgerMetadata.from_json_bytes(data), stat.version

    async def cas_metadata(self, ledger_id: int, metadata: LedgerMetadata, version: int) -> int:
        """Write `metadata` if the stored version is still `version`; return the new version.
        MetadataVersionConflict if it is not; NoSuchLedgerError if the ledger is gone."""
        from ledger_backend.metadata.store import BadVersionError, NoNodeError

        if version < 0:
            raise ValueError("ledger metadata is only ever written with a version check")
        try:
            stat = await self._bounded(
                "update ledger",
                lambda: self.store.set(ledger_path(ledger_id), metadata.to_json_bytes(), version),
            )
        except BadVersionError:
            raise MetadataVersionConflict(f"ledger {ledger_id} changed under us") from None
        except NoNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} was deleted") from None
        return stat.version

    async def cas_metadata_with(self, ledger_id: int, metadata: LedgerMetadata, version: int,
                                ops: list[Op]) -> tuple[int, list[OpResult]] | None:
        """cas_metadata and `ops` in one store transaction (all or nothing): the ledger's new
        version and the results of `ops`, or None when the transaction was refused (the
        ledger's version, or one of `ops`' versions or nodes): nothing was written."""
        from ledger_backend.metadata.store import (
            BadVersionError,
            NodeExistsError,
            NoNodeError,
            SetOp,
            Stat,
        )

        if version < 0:
            raise ValueError("ledger metadata is only ever written with a version check")
        change = SetOp(ledger_path(ledger_id), metadata.to_json_bytes(), version)
        try:
            results = await self._bounded("update ledger", lambda: self.store.multi([change, *ops]))
        except (BadVersionError, NoNodeError, NodeExistsError):
            return None
        stat = results[0]
        assert isinstance(stat, Stat)
        return stat.version, results[1:]

    async def delete_metadata(self, ledger_id: int) -> None:
        from ledger_backend.metadata.store import NoNodeError

        try:
            await self._bounded("delete ledger", lambda: self.store.delete(ledger_path(ledger_id)))
        except NoNodeError:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist") from None

    async def list_ledger_ids(self) -> list[int]:
        from ledger_backend.metadata.store import NoNodeError

        try:
            names = await self._bounded("list ledgers", lambda: self.store.children(LEDGERS_PATH))
        except NoNodeError:
            return []
        ids = (ledger_id_from_node_name(n) for n in names)
        return sorted(i for i in ids if i is not None)
