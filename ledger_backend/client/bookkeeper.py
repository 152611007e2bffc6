"""BookKeeper: the ledger client's entry point (create, open, recover, delete, list ledgers).

Ledger ids come from store.next_id("/ledgerwire/ledger-id") (a managed ledger's first ledger:
from a block reserved on that counter, ledger_ids.py); ensembles are chosen among the
bookies registered under /ledgerwire/bookies/available; metadata lives at
/ledgerwire/ledgers/<zero-padded id>. A BookKeeper owns a nursery for its bookie connections
and ensemble changes, so it must be used as `async with BookKeeper(store) as bk:`.
Deleting a ledger removes its metadata only; bookies garbage-collect the entries.

This module must never write ledger metadata without a version check, and never open a ledger
for writing (there is exactly one writer per ledger: its creator).
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING

import trio

from ledger_backend.bookie import local_bookies as local_bookies_registry
from ledger_backend.bookie.auth import BookieCredential
from ledger_backend.bookie.master_key import derive_master_key, master_key_hash, new_salt
from ledger_backend.bookie.protocol import DEFAULT_MAX_FRAME_BYTES
from ledger_backend.bookie.tls import BookieTls
from ledger_backend.client.bookie_pool import BookieClientPool
from ledger_backend.client.client_context import ClientContext
from ledger_backend.client.errors import LedgerClosedError
from ledger_backend.client.ledger_ids import LedgerIdBlocks
from ledger_backend.client.ledger_metadata import (
    DIGEST_TYPE_HMAC_SHA256,
    LEDGER_ID_COUNTER_PATH,
    LEDGERS_PATH,
    LedgerMetadata,
    PreparedLedger,
    ledger_path,
    validate_quorums,
)
from ledger_backend.client.placement import PlacementPolicy
from ledger_backend.client.read_handle import ReadHandle, read_lac_from_bookies
from ledger_backend.client.recovery import recover_ledger
from ledger_backend.client.write_handle import WriteHandle
from ledger_backend.metadata.store import CreateOp, NodeExistsError

if TYPE_CHECKING:
    from ledger_backend.metadata.store import MetadataStore

__all__ = ["BookKeeper", "PreparedLedger", "ReadHandle", "WriteHandle"]

BOOKIE_LIST_TTL_S = 0.1  # new ledgers' ensembles come from a bookie list this fresh



def _served_here(address: str) -> bool:
    return local_bookies_registry.lookup(address) is not None


class BookKeeper:
    """A ledger client over the bookies registered in `store`."""

    def __init__(
        self,
        store: MetadataStore,
        *,
        timeout_s: float = 10.0,
        placement: PlacementPolicy | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        local_bookies: bool = False,
        explicit_lac_delay_s: float = 0.2,
        bookie_secret: BookieCredential | None = None,
        bookie_tls: BookieTls | None = None,
        ledger_password: bytes | None = None,
        entry_mac: bool = False,
        batch_reads: bool = True,
    ) -> None:
        if entry_mac and ledger_password is None:
            raise ValueError("MAC digests on entries need a ledger password")
        self._store = store
        self._batch_reads = batch_reads  # range reads as READ_ENTRIES (client/batch_reads.py)
        self._ledger_password = ledger_password  # new ledgers get it; recovery presents it
        self._entry_mac = entry_mac  # new ledgers' entries carry an HMAC-SHA256, not a CRC
        self._bookie_secret = bookie_secret  # authenticates every TCP bookie connection
        self._bookie_tls = bookie_tls.client_context() if bookie_tls else None
        self.explicit_lac_delay_s = explicit_lac_delay_s  # 0: readers trail by one entry
        self._local_bookies = local_bookies  # reach bookies of this process without the wire
        self.timeout_s = timeout_s
        # new ensembles start on this process's own bookies (no wire, no other process's
        # event loop per add); the others only as the ensemble size needs them
        self._placement = placement or PlacementPolicy(
            prefer=_served_here if local_bookies else None)
        self._max_frame_bytes = max_frame_bytes
        self._ctx: ClientContext | None = None
        self._closed = False
        self._first_ids = LedgerIdBlocks(store, LEDGER_ID_COUNTER_PATH)
        self._bookies_seen: tuple[float, list[str]] | None = None  # (when, bookies)
        self._ledgers_dir_exists = False

    async def __aenter__(self) -> BookKeeper:
        self._nursery_manager = trio.open_nursery()
        nursery = await self._nursery_manager.__aenter__()
        pool = BookieClientPool(nursery, timeout_s=self.timeout_s,
                                max_frame_bytes=self._max_frame_bytes,
                                local_bookies=self._local_bookies,
                                secret=self._bookie_secret,
                                ssl_context=self._bookie_tls,
                                batch_reads=self._batch_reads)  # fmt: skip
        self._ctx = ClientContext(self._store, pool, self._placement, nursery, self.timeout_s,
                                  self.explicit_lac_delay_s, self._ledger_password)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # The body's own exception is not handed to the nursery (it would come back wrapped in
        # an ExceptionGroup); the nursery only holds this client's background tasks.
        try:
            if self._ctx is not None:
                with trio.CancelScope(shield=True):
                    await self.close()
                self._ctx.nursery.cancel_scope.cancel()
        finally:
            await self._nursery_manager.__aexit__(None, None, None)

    @property
    def context(self) -> ClientContext:
        if self._ctx is None:
            raise RuntimeError("use BookKeeper as `async with BookKeeper(store) as bk:`")
        if self._closed:
            raise LedgerClosedError("this BookKeeper client is closed")
        return self._ctx

    async def create_ledger(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        custom_metadata: dict[str, bytes] | None = None,
    ) -> WriteHandle:
        validate_quorums(ensemble_size, write_quorum, ack_quorum)
        ctx = self.context
        metadata = await self._new_metadata(ensemble_size, write_quorum, ack_quorum,
                                            custom_metadata)
        ledger_id = await ctx.next_ledger_id(LEDGER_ID_COUNTER_PATH)
        version = await ctx.create_metadata(ledger_id, metadata)
        self._tell_local_bookies(ledger_id, metadata)
        return WriteHandle(ctx, ledger_id, metadata, version)

    async def prepare_ledger(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        custom_metadata: dict[str, bytes] | None = None,
        *,
        above: int = 0,
    ) -> PreparedLedger:
        """A ledger whose metadata is left for the caller's multi: the first of a new managed
        ledger, or the first a new owner appends to a list whose highest id is `above`.  Its
        id comes from a reserved block, greater than `above` (ledger_ids.py): never use it for
        any other ledger of a list."""
        validate_quorums(ensemble_size, write_quorum, ack_quorum)
        ctx = self.context
        if not self._ledgers_dir_exists:
            if await ctx._bounded("find ledgers", lambda: self._store.exists(LEDGERS_PATH)) is None:
                try:
                    await ctx._bounded("create ledgers", lambda: self._store.create(
                        LEDGERS_PATH, b"", make_parents=True))
                except NodeExistsError:
                    pass
            self._ledgers_dir_exists = True
        metadata = await self._new_metadata(ensemble_size, write_quorum, ack_quorum,
                                            custom_metadata)
        # not bounded by the client timeout: thousands of opens may queue for one reservation
        ledger_id = await self._first_ids.take(above)
        return PreparedLedger(ledger_id, metadata,
                              (CreateOp(ledger_path(ledger_id), metadata.to_json_bytes()),))

    def adopt_ledger(self, prepared: PreparedLedger) -> WriteHandle:
        """The write handle of a prepared ledger whose ops were committed (version 0)."""
        self._tell_local_bookies(prepared.ledger_id, prepared.metadata)
        return WriteHandle(self.context, prepared.ledger_id, prepared.metadata, 0)

    def _tell_local_bookies(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        """The bookies of this process in the new ledger's ensemble learn its key hash, which
        the store now holds (bookie/ledger_keys.py): its first add needs no metadata read."""
        if not self._local_bookies:
            return
        for address in metadata.ensembles[0][1]:
            learn = getattr(local_bookies_registry.lookup(address), "learn_key", None)
            if learn is not None:
                learn(ledger_id, metadata.password_hash)

    async def _new_metadata(self, ensemble_size: int, write_quorum: int, ack_quorum: int,
                            custom_metadata: dict[str, bytes] | None) -> LedgerMetadata:
        ctx = self.context
        available = await self._bookies_for_new_ledger(ensemble_size)
        ensemble = ctx.placement.choose_ensemble(available, ensemble_size)
        metadata = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            ensembles=((0, tuple(ensemble)),),
            ctime_ms=int(time.time() * 1000),
            custom_metadata=dict(custom_metadata or {}),
        )
        if self._ledger_password is not None:
            salt = new_salt()
            key = derive_master_key(self._ledger_password, salt)
            metadata = metadata.replace(password_salt=salt, password_hash=master_key_hash(key))
            if self._entry_mac:
                metadata = metadata.replace(digest_type=DIGEST_TYPE_HMAC_SHA256)
        return metadata

    async def _bookies_for_new_ledger(self, ensemble_size: int) -> list[str]:
        """The registered bookies, read at most once per BOOKIE_LIST_TTL_S for new ledgers'
        ensembles (the partitions a produce request opens together each listed them: 7% of the
        event loop's time in a first-write round).  A bookie gone within that time may be chosen
        once more; its first add fails and the ensemble change (which lists afresh) replaces it,
        as for a bookie that dies just after the choice.  A list too short for the ensemble
        is read again: a bookie that (re)registered meanwhile is used at once."""
        now = time.monotonic()
        seen = self._bookies_seen
        if seen is not None and now - seen[0] < BOOKIE_LIST_TTL_S \
                and len(seen[1]) >= ensemble_size:
            return seen[1]
        available = await self.context.available_bookies()
        self._bookies_seen = (now, available) if available else None
        return available

    async def open_ledger(self, ledger_id: int, *, recovery: bool) -> ReadHandle:
        """recovery=True: fence, recover and close the ledger (if not closed yet), then read it.
        recovery=False: read a closed ledger, or an open one up to its current LAC."""
        ctx = self.context
        if recovery:
            metadata, version = await recover_ledger(ctx, ledger_id)
            return ReadHandle(ctx, ledger_id, metadata, version, metadata.last_entry_id)
        metadata, version = await ctx.read_metadata(ledger_id)
        if metadata.is_closed:
            return ReadHandle(ctx, ledger_id, metadata, version, metadata.last_entry_id)
        lac = await read_lac_from_bookies(ctx, ledger_id, metadata)
        return ReadHandle(ctx, ledger_id, metadata, version, lac)

    async def delete_ledger(self, ledger_id: int) -> None:
        await self.context.delete_metadata(ledger_id)

    async def list_ledgers(self) -> list[int]:
        return await self.context.list_ledger_ids()

    async def close(self) -> None:
        """Close every bookie connection; handles of this client stop working."""
        if self._closed or self._ctx is None:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        await self._ctx.pool.close()
