"""Opening, listing and deleting managed ledgers; the open path is where ownership is taken.

Opening a managed ledger (the new owner's steps, in this order):
  1. read (or create) its metadata node and remember the version;
  2. every ledger in the list not marked closed — normally only the last one, left OPEN by
     an owner that crashed — is opened with recovery=True: that FENCES it (the old writer's
     next add fails) and closes it at its real last entry, which is recorded;
  3. a new ledger is created and CAS-appended to the list (empty ledgers are dropped from it)
     in ONE metadata transaction: the ledger's metadata and the list naming it (with the
     recovered ends of step 2), its id from a reserved block above every listed id
     (client/ledger_ids.py). A BadVersionError here means another owner got in first:
     neither was written, and the open fails loudly (ManagedLedgerFencedError). The node is
     never overwritten blindly. Nothing is appended to the new ledger before this write.

A managed ledger that does not exist yet is created in ONE metadata write: its node (listing
its first ledger), its cursors directory, that ledger's metadata and whatever the caller asks
for (`create_with`, e.g. the partition's state node) in one multi(), all or nothing. Nothing
existed before, so there is nothing to fence; a NodeExistsError/NoNodeError (a concurrent
creator, a missing parent) falls back to the general path above. The ledger's id then comes
from a reserved block (client/ledger_ids.py): it is the first and lowest of its list.

Deleting removes the metadata (cursors and the node, atomically, CAS on the node version)
BEFORE deleting the ledgers (and the objects of offloaded ones). This module must never open
a ledger it does not own for writing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import trio

from ledger_backend.bookie.crash_points import crash_point
from ledger_backend.client.errors import LedgerError, NoSuchLedgerError
from ledger_backend.client.ledger_metadata import PreparedLedger
from ledger_backend.managed_ledger.client_protocol import BookKeeperLike, WriteHandleLike
from ledger_backend.managed_ledger.cursor import Cursor, load_cursor
from ledger_backend.managed_ledger.entry_reader import LedgerReaders
from ledger_backend.managed_ledger.ledger_swap import collect_garbage
from ledger_backend.managed_ledger.managed_ledger import ManagedLedger
from ledger_backend.managed_ledger.metadata_format import (
    LedgerRecord,
    ManagedLedgerNode,
    cursors_path,
    decode_managed_ledger,
    decode_name,
    encode_managed_ledger,
    managed_ledger_path,
)
from ledger_backend.managed_ledger.offloading import sweep_pending_uploads
from ledger_backend.managed_ledger.types import (
    ManagedLedgerConfig,
    ManagedLedgerFencedError,
    ManagedLedgerNotFoundError,
    MetadataFormatError,
)
from ledger_backend.metadata.store import (
    BadVersionError,
    CreateOp,
    DeleteOp,
    MetadataError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SetOp,
    Stat,
)
from ledger_backend.offload.object_reader import DEFAULT_CACHE_BYTES, OffloadedReader
from ledger_backend.offload.offloader import Offloader, OffloadError, at_recorded

log = logging.getLogger(__name__)

# kill -9 points of a new owner's one-transaction list write (tests/managed_ledger/
# test_reopen_crash.py)
OPEN_CRASH_POINTS = ("managed_ledger.open.before_list", "managed_ledger.open.after_list")

DEFAULT_ROOT = "/ledgerwire/managed-ledgers"


class ManagedLedgerFactory:
    """Opens managed ledgers on one metadata store and one ledger client.

    One factory caches the instances it opened: opening a name again returns the same
    (still usable) instance rather than fencing itself. `clock` (wall-clock seconds) drives
    ledger ages and retention; tests may pass a fake one.
    """

    def __init__(
        self,
        store: MetadataStore,
        bk: BookKeeperLike,
        root: str = DEFAULT_ROOT,
        *,
        clock: Callable[[], float] = time.time,
        offloader: Offloader | None = None,
        offload_cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if not root.startswith("/") or root.endswith("/") and root != "/":
            raise ValueError(f"root must be an absolute path without a trailing '/': {root!r}")
        self._store = store
        self._bk = bk
        self._root = root
        self._clock = clock
        self.offloader = offloader  # tiered storage for every managed ledger it opens
        self._offloaded_reader = OffloadedReader(
            {offloader.driver: offloader} if offloader is not None else {}, offload_cache_bytes
        )
        self._open: dict[str, ManagedLedger] = {}
        self._name_locks: dict[str, trio.Lock] = {}
        self._root_exists = False

    async def open(self, name: str, config: ManagedLedgerConfig | None = None, *,
                   create_with: Sequence[CreateOp] = ()) -> ManagedLedger:
        """Open (or create) `name`. If this call creates it, `create_with` is created in the
        same multi and the result's `created_with` is True; otherwise they are not created."""
        lock = self._name_locks.setdefault(name, trio.Lock())
        async with lock:
            existing = self._open.get(name)
            if existing is not None and not existing.is_closed and not existing.is_fenced:
                if config is not None:
                    existing.config = config
                existing.created_with = False  # not by this call
                return existing
            ml = await self._open_fresh(name, config or ManagedLedgerConfig(), tuple(create_with))
            self._open[name] = ml
            return ml

    async def exists(self, name: str) -> bool:
        return await self._store.exists(managed_ledger_path(self._root, name)) is not None

    async def list_names(self) -> list[str]:
        try:
            children = await self._store.children(self._root)
        except NoNodeError:
            return []
        return sorted(decode_name(child) for child in children)

    async def delete(self, name: str) -> None:
        """Delete the managed ledger: metadata first (atomically, CAS), then its ledgers."""
        lock = self._name_locks.setdefault(name, trio.Lock())
        async with lock:
            existing = self._open.pop(name, None)
            if existing is not None:
                await existing.close()
            path = managed_ledger_path(self._root, name)
            try:
                data, stat = await self._store.get(path)
            except NoNodeError:
                raise ManagedLedgerNotFoundError(f"no managed ledger {name!r}") from None
            node = decode_managed_ledger(data, path)
            cursors_dir = cursors_path(self._root, name)
            try:
                cursor_names = await self._store.children(cursors_dir)
                ops: list[DeleteOp] = [DeleteOp(f"{cursors_dir}/{c}") for c in cursor_names]
                ops.append(DeleteOp(cursors_dir))
            except NoNodeError:
                ops = []
            ops.append(DeleteOp(path, stat.version))
            try:
                await self._store.multi(ops)
            except (BadVersionError, NoNodeError) as exc:
                raise ManagedLedgerFencedError(
                    f"managed ledger {name!r} changed while being deleted; not deleted"
                ) from exc
            for ledger_id in [*(r.ledger_id for r in node.ledgers), *node.pending,
                              *node.garbage]:
                await _delete_ledger_quietly(self._bk, ledger_id)
            for record in node.ledgers:
                if record.offload is not None:
                    await self._delete_object_quietly(name, record.offload.driver,
                                                      record.offload.key,
                                                      record.offload.location)
            self._drop_name_lock(name, lock, held=True)

    def _drop_name_lock(self, name: str, lock: trio.Lock, *, held: bool) -> None:
        """Forget a name's lock nobody waits for (deleted or closed names would otherwise
        keep one each: a churn of topics, or idle partitions unloaded, grew the map without
        bound).  A later open makes a new one."""
        if (self._name_locks.get(name) is lock and lock.locked() == held
                and not lock.statistics().tasks_waiting):
            del self._name_locks[name]

    async def _delete_object_quietly(self, name: str, driver: str, key: str,
                                     location: tuple[tuple[str, str], ...] = ()) -> None:
        offloader = self.offloader
        if offloader is None or offloader.driver != driver:
            log.warning("%r deleted: its object %r (%s) is left behind (driver not configured)",
                        name, key, driver)
            return
        try:  # where it was recorded, even if [offload] names another place now
            await at_recorded(offloader, location).delete(key)
        except OffloadError as exc:
            log.warning("%r deleted: could not delete its object %r: %s", name, key, exc)

    async def close(self) -> None:
        """Close every managed ledger this factory opened."""
        for ml in list(self._open.values()):
            await ml.close()
        self._open.clear()

    # ----------------------------------------------------------------- the open path

    async def _open_fresh(self, name: str, config: ManagedLedgerConfig,
                          create_with: tuple[CreateOp, ...]) -> ManagedLedger:
        path = managed_ledger_path(self._root, name)
        cursors_dir = cursors_path(self._root, name)
        try:
            loaded: tuple[bytes, int] | None = await self._read_node(path)
        except NoNodeError:
            created = await self._create_with_ledger(name, path, cursors_dir, config, create_with)
            if created is not None:
                return created
            loaded = None
        node, version = await self._load_or_create(name, path, cursors_dir, loaded)
        readers = LedgerReaders(self._bk)
        next_ledger: list[PreparedLedger] = []
        failures: list[Exception] = []  # raised below as they are (not as an ExceptionGroup)

        async def prepare_next() -> None:
            try:
                next_ledger.append(await self._bk.prepare_ledger(
                    config.ensemble_size,
                    config.write_quorum,
                    config.ack_quorum,
                    {"managed-ledger": name.encode("utf-8")},
                    above=max((r.ledger_id for r in node.ledgers), default=0),
                ))
            except Exception as exc:
                failures.append(exc)

        try:
            # The next ledger is prepared while the unclosed ones are fenced and recovered (a
            # take-over's pause is the longer of the two, not their sum); only the write below,
            # after recovery succeeded, creates it and names it in the list.
            async with trio.open_nursery() as opening:
                opening.start_soon(prepare_next)
                try:
                    recovered = await self._recover_unclosed(node.ledgers, readers)
                except Exception as exc:
                    failures.insert(0, exc)
            if failures:
                raise failures[0]
            prepared = next_ledger[0]
            empty = [r for r in node.ledgers if r.entries == 0]
            kept = [r for r in node.ledgers if r.entries > 0]
            current = LedgerRecord(prepared.ledger_id, 0, 0, int(self._clock() * 1000),
                                   closed=False)
            node.ledgers = [*kept, current]
            stat = await self._list_next_ledger(name, path, node, version, prepared)
            handle = self._bk.adopt_ledger(prepared)
            for record in empty:
                await _delete_ledger_quietly(self._bk, record.ledger_id)
            cursors = await self._load_cursors(cursors_dir)
        except BaseException:
            with trio.CancelScope(shield=True):
                await readers.close_all()
            raise
        # INFO only when it took something over (a restart reopens every partition used:
        # 100,000 lines of INFO, ~4% of a reopen's CPU, said nothing the recovery lines do not)
        log.log(logging.INFO if recovered else logging.DEBUG,
                "opened managed ledger %r: ledgers %s, writing ledger %d",
                name, [r.ledger_id for r in node.ledgers], handle.ledger_id)
        ml = self._instance(name, config, path, node, stat.version, handle, readers, cursors)
        if node.pending or node.garbage:
            # A rewrite died before its swap (pending) or before deleting what it swapped out
            # (garbage): neither is listed, so both go now (ledger_swap.py).
            try:
                await collect_garbage(ml, include_pending=True)
            except (LedgerError, MetadataError, ManagedLedgerFencedError) as exc:
                log.warning("managed ledger %r: rewrite clean-up failed: %r", name, exc)
        if node.offload_pending:
            try:
                await sweep_pending_uploads(ml)
            except (MetadataError, ManagedLedgerFencedError, OffloadError) as exc:
                log.warning("managed ledger %r: offload clean-up failed: %r", name, exc)
        return ml

    async def _list_next_ledger(self, name: str, path: str, node: ManagedLedgerNode,
                                version: int, prepared: PreparedLedger) -> Stat:
        """Create the new owner's ledger and CAS the list naming it (recovered records
        included) in ONE metadata transaction: a refusal or a crash leaves neither, so no
        ledger is ever named nowhere (it was a counter write, a create and a set)."""
        crash_point(OPEN_CRASH_POINTS[0])
        try:
            results = await self._store.multi(
                [*prepared.ops, SetOp(path, encode_managed_ledger(node), version)])
        except (BadVersionError, NoNodeError) as exc:
            raise ManagedLedgerFencedError(
                f"managed ledger {name!r}: metadata node {path} changed while opening "
                f"(expected version {version}); another owner opened it"
            ) from exc
        crash_point(OPEN_CRASH_POINTS[1])
        stat = results[-1]
        assert isinstance(stat, Stat)
        return stat

    def _instance(self, name: str, config: ManagedLedgerConfig, path: str,
                  node: ManagedLedgerNode, version: int, handle: WriteHandleLike,
                  readers: LedgerReaders, cursors: dict[str, Cursor]) -> ManagedLedger:
        return ManagedLedger(
            name=name,
            config=config,
            store=self._store,
            bk=self._bk,
            path=path,
            cursors_path=cursors_path(self._root, name),
            node=node,
            version=version,
            current_handle=handle,
            readers=readers,
            cursors=cursors,
            clock=self._clock,
            on_close=self._forget,
            offloader=self.offloader,
            offloaded_reader=self._offloaded_reader,
        )

    async def _create_with_ledger(
        self, name: str, path: str, cursors_dir: str, config: ManagedLedgerConfig,
        create_with: tuple[CreateOp, ...],
    ) -> ManagedLedger | None:
        """Create a new managed ledger and its first ledger in one multi (module docstring);
        None when that multi finds the node or a parent missing or present."""
        await self._ensure_root()
        prepared = await self._bk.prepare_ledger(
            config.ensemble_size, config.write_quorum, config.ack_quorum,
            {"managed-ledger": name.encode("utf-8")})
        now_ms = int(self._clock() * 1000)
        node = ManagedLedgerNode(
            name, now_ms, [LedgerRecord(prepared.ledger_id, 0, 0, now_ms, closed=False)])
        try:
            await self._store.multi([
                *prepared.ops, CreateOp(path, encode_managed_ledger(node)),
                CreateOp(cursors_dir, b""), *create_with])
        except (NodeExistsError, NoNodeError) as exc:
            log.debug("managed ledger %r: one-write create fell back (%r)", name, exc)
            self._root_exists = False  # (a test may have deleted it)
            return None
        handle = self._bk.adopt_ledger(prepared)
        log.debug("created managed ledger %r: writing ledger %d", name, prepared.ledger_id)
        ml = self._instance(name, config, path, node, 0, handle, LedgerReaders(self._bk), {})
        ml.created_with = bool(create_with)
        return ml

    async def _read_node(self, path: str) -> tuple[bytes, int]:
        data, stat = await self._store.get(path)
        return data, stat.version

    async def _load_or_create(
        self, name: str, path: str, cursors_dir: str, loaded: tuple[bytes, int] | None
    ) -> tuple[ManagedLedgerNode, int]:
        if loaded is not None:
            data, version = loaded
        else:
            await self._ensure_root()
            fresh = ManagedLedgerNode(name, int(self._clock() * 1000), [])
            try:
                await self._store.multi(
                    [CreateOp(path, encode_managed_ledger(fresh)), CreateOp(cursors_dir, b"")]
                )
            except NodeExistsError:
                pass  # created concurrently; read what is there
            data, version = await self._read_node(path)
        node = decode_managed_ledger(data, path)
        if node.name != name:
            raise MetadataFormatError(
                f"node {path} holds managed ledger {node.name!r}, not {name!r}"
            )
        return node, version

    async def _ensure_root(self) -> None:
        if self._root_exists:
            return
        if await self._store.exists(self._root) is None:
            try:
                await self._store.create(self._root, b"", make_parents=True)
            except NodeExistsError:
                pass
        self._root_exists = True  # never deleted (only what is below it)

    async def _recover_unclosed(self, records: list[LedgerRecord], readers: LedgerReaders) -> int:
        """Fence and close every ledger not known to be closed, recording its real end; how
        many there were."""
        unclosed = sum(not r.closed for r in records)
        for record in records:
            if record.closed:
                continue
            try:
                handle = await self._bk.open_ledger(record.ledger_id, recovery=True)
            except NoSuchLedgerError:
                log.warning("ledger %d listed but missing: dropping it", record.ledger_id)
                record.entries, record.size, record.closed = 0, 0, True
                continue
            entries = handle.metadata.last_entry_id + 1
            if entries < record.entries:
                log.error(
                    "ledger %d recovered to %d entries but the list said %d",
                    record.ledger_id,
                    entries,
                    record.entries,
                )
            record.entries = entries
            record.size = handle.metadata.length
            record.closed = True
            readers.adopt(handle)
            log.info("recovered ledger %d: %d entries", record.ledger_id, entries)
        return unclosed

    async def _load_cursors(self, cursors_dir: str) -> dict[str, Cursor]:
        try:
            children = await self._store.children(cursors_dir)
        except NoNodeError:
            await self._store.create(cursors_dir, b"")
            children = []
        cursors: dict[str, Cursor] = {}
        for child in children:
            try:
                cursor = await load_cursor(self._store, f"{cursors_dir}/{child}")
            except NoNodeError:
                continue  # deleted meanwhile
            cursors[cursor.name] = cursor
        return cursors

    def _forget(self, ml: ManagedLedger) -> None:
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]
            lock = self._name_locks.get(ml.name)
            if lock is not None:
                self._drop_name_lock(ml.name, lock, held=False)


async def _delete_ledger_quietly(bk: BookKeeperLike, ledger_id: int) -> None:
    try:
        await bk.delete_ledger(ledger_id)
    except NoSuchLedgerError:
        pass
    except LedgerError as exc:
        log.warning("could not delete ledger %d: %r", ledger_id, exc)
