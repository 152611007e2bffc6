"""Synchronous access to ledgerwire's metadata and ledgers for Spark's (non-async) Python code.

Spark calls the data source from plain threads, and its `read` methods are generators, which
cannot live inside `trio.run`. `LedgerAccess` therefore runs one Trio loop in a daemon thread
(trio_thread.py) holding a read-only metadata store and a `BookKeeper` ledger client, and
exposes blocking calls plus a prefetching chunk iterator: while Spark's thread decodes one
chunk of entries, the Trio thread already reads the next from the bookies.

Two ways to reach the entries (`ReadMode`):
  - "bookies": the ledger client, over the network, like any BookKeeper reader. Ledgers are
    opened with recovery=False ALWAYS: a reader must never fence a live writer; the open
    ledger is read up to its last-add-confirmed.
  - "files": a stopped `ledgerwire standalone`'s bookie directories (bookie_files.py); the
    metadata comes from its sqlite file, read-only.
The open ledger's last entry: a bookie learns the LAC only from the next add, so a reader that
stops at the LAC would not see a partition's last batch until something else is produced.
With tail="quorum" (the default) entries past the LAC are also read when at least Qa bookies of
their write set hold a copy that passes its digest: exactly the entries that ledger recovery
would keep (it gives up on an entry only after Qw - Qa + 1 bookies lack it), so no reader ever
sees an entry that a later owner could lose. tail="lac" is BookKeeper's plain rule.
`resolve_read_mode` picks "files" only for a standalone data directory whose registered bookies
refuse connections (the broker process is not running). That choice is the driver's; a task
makes its own with `mode_on_this_host`: "files" only where the standalone's files are (its
metadata database and every bookie directory), so a Spark executor on another host reads the
same ledgers from their bookies over the network, at the addresses they registered
(`[storage] bookie_advertised_host`, a cluster bookie's `--advertised-host`), with the metadata
its split carries; planning ships it in both modes.
Ledgers offloaded to tiered storage (`add_offloaded`, from the managed ledger's records) are
read from the offload store in either mode (offloaded_ledgers.py), never from bookies.
An executor given its ledgers' metadata and readable ends by the driver (`shipped`, from
`LedgerAccess.shipped` at planning) opens no metadata store at all: with a read ticket it
talks only to bookies, and needs neither ZooKeeper nor its credentials.

This module must never write metadata, open a ledger with recovery, or read a bookie directory
while its bookie answers.
"""

from __future__ import annotations

import logging
import queue
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import trio

from ledger_backend.bookie.auth import BookieCredential, BookieSecret
from ledger_backend.bookie.protocol import ReadEntryRequest, ReadEntryResponse
from ledger_backend.bookie.read_ticket import ReadTicket
from ledger_backend.bookie.tls import BookieTls
from ledger_backend.client.bookie_client import check_status
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.entry_format import decode_entry
from ledger_backend.client.errors import LedgerError, NoSuchEntryError
from ledger_backend.client.ledger_metadata import (
    AVAILABLE_BOOKIES_PATH,
    LedgerMetadata,
    ledger_path,
)
from ledger_backend.client.read_handle import read_range_from_bookies
from ledger_backend.metadata import open_store
from ledger_backend.metadata.embedded_readonly import URL_PREFIX as READONLY_URL_PREFIX
from ledger_backend.metadata.embedded_readonly import ReadOnlyEmbeddedStore
from ledger_backend.metadata.sqlite_tree import DB_FILE
from ledger_backend.metadata.store import MetadataStore, NoNodeError
from ledger_backend.metadata.zk_url import redact
from spark_bridge.bookie_files import BookieFiles
from spark_bridge.metadata_access import (
    ConnectionSpec,
    open_embedded_sync,
    open_readonly_store,
)
from spark_bridge.offloaded_ledgers import OffloadedLedger, OffloadedLedgers
from spark_bridge.trio_thread import TrioThread

logger = logging.getLogger("spark_bridge.ledger_access")
ReadMode = Literal["bookies", "files"]
# what the driver ships per ledger: (ledger id, metadata node bytes, readable last entry, closed)
ShippedLedger = tuple[int, bytes, int, bool]
TailRule = Literal["quorum", "lac"]
T = TypeVar("T")
_PREFETCH_CHUNKS = 2
_STOP = object()


@dataclass(frozen=True)
class LedgerEnd:
    last_entry: int   # closed: its last entry; open: per the tail rule (-1: nothing yet)
    closed: bool


def _bookie_answers(address: str, timeout_s: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def resolve_read_mode(spec: ConnectionSpec, requested: str = "auto") -> ReadMode:
    """"bookies" or "files" (see the module docstring); ValueError names the option."""
    if requested not in ("auto", "bookies", "files"):
        raise ValueError(
            f"option 'ledgerwire.readFrom'={requested!r}: expected auto, bookies or files"
        )
    if requested == "files" and not spec.bookie_dirs:
        raise ValueError("option 'ledgerwire.readFrom'=files needs 'ledgerwire.metadata' to be "
                         "a standalone data directory (with bookies/<i>/ in it)")
    if requested != "auto":
        return requested  # type: ignore[return-value]
    if not (spec.is_embedded and spec.bookie_dirs):
        return "bookies"
    store = open_embedded_sync(spec)
    try:
        try:
            available = store.children_sync(AVAILABLE_BOOKIES_PATH)
        except NoNodeError:
            available = []
    finally:
        store.close_sync()
    return "bookies" if any(_bookie_answers(a) for a in available) else "files"


def files_here(spec: ConnectionSpec) -> bool:
    """Whether this host has the standalone's files: its metadata database and every bookie
    directory the driver resolved."""
    if not (spec.is_embedded and spec.bookie_dirs):
        return False
    metadata_dir = Path(spec.metadata_url[len(READONLY_URL_PREFIX):])
    return (metadata_dir / DB_FILE).is_file() and all(Path(d).is_dir() for d in spec.bookie_dirs)


def mode_on_this_host(spec: ConnectionSpec, mode: ReadMode) -> ReadMode:
    """The driver's `mode` as this host can serve it (see the module docstring): "files" only
    where the files are, else the bookies over the network."""
    if mode == "files" and not files_here(spec):
        logger.info("the standalone's files (%s) are not on this host (%s): reading its "
                    "bookies over the network", spec.bookie_dirs[0] if spec.bookie_dirs
                    else spec.metadata_url, socket.gethostname())  # fmt: skip
        return "bookies"
    return mode


def not_here_hint(spec: ConnectionSpec) -> str:
    """What a failed network read of a standalone whose files are elsewhere tells the user."""
    where = spec.bookie_dirs[0] if spec.bookie_dirs else spec.metadata_url
    return (f"the standalone's files ({where}) are not on this host ({socket.gethostname()}), "
            "so its bookies were read over the network: start the standalone with its bookies "
            "registered at an address this host reaches ([storage] bookie_advertised_host), or "
            "run the job on the standalone's host")


class LedgerAccess:
    """Blocking metadata reads and ledger reads; use as a context manager."""

    def __init__(self, spec: ConnectionSpec, mode: ReadMode, *, tail: TailRule = "quorum",
                 timeout_s: float = 30.0, shipped: tuple[ShippedLedger, ...] | None = None
                 ) -> None:  # fmt: skip
        self.spec = spec
        self.mode = mode
        self.tail = tail
        self.timeout_s = timeout_s
        self._files: BookieFiles | None = None
        self._sync_store: ReadOnlyEmbeddedStore | None = None
        self._loop = TrioThread("ledgerwire-access", call_timeout_s=timeout_s * 2)
        self._store: MetadataStore | None = None
        self._bk: BookKeeper | None = None
        self._ledgers: dict[int, tuple[LedgerMetadata, LedgerEnd]] = {}
        self.closed_spans: dict[int, Any] = {}  # ledger id -> topic_layout.LedgerSpan (final)
        self._offloaded = OffloadedLedgers(spec.offload) if spec.offload else None
        self._no_store = shipped is not None and mode == "bookies"
        self.add_shipped(shipped or ())
        if mode == "files":
            self._sync_store = open_embedded_sync(spec)
            self._files = BookieFiles(list(spec.bookie_dirs))
        else:
            self._start_loop()

    # ---- the Trio thread ------------------------------------------------------------------

    @asynccontextmanager
    async def _resources(self) -> AsyncIterator[None]:
        # shipped metadata: an empty private store, so a lookup the driver did not foresee
        # fails as a missing node instead of reaching for ZooKeeper
        store = await (open_store("memory:") if self._no_store
                       else open_readonly_store(self.spec))  # fmt: skip
        try:
            secret: BookieCredential | None = (
                ReadTicket.decode(self.spec.read_ticket) if self.spec.read_ticket
                else BookieSecret.load(file=self.spec.bookie_secret_file))
            tls = BookieTls(*self.spec.bookie_tls)
            async with BookKeeper(store, timeout_s=self.timeout_s, bookie_secret=secret,
                                  bookie_tls=tls) as bk:  # fmt: skip
                self._store, self._bk = store, bk
                yield
        finally:
            with trio.CancelScope(shield=True):
                await store.close()

    def _start_loop(self) -> None:
        try:
            self._loop.start(self._resources)
        except BaseException as exc:
            where = redact(self.spec.metadata_url)
            raise RuntimeError(f"cannot reach ledgerwire metadata at {where}: {exc}") from exc

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._loop.call(fn, *args)

    def close(self) -> None:
        if self._offloaded is not None:
            self._offloaded.close()
        if self._files is not None:
            self._files.close()
            self._files = None
        if self._sync_store is not None:
            self._sync_store.close_sync()
            self._sync_store = None
        self._loop.stop()

    def __enter__(self) -> LedgerAccess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- metadata -------------------------------------------------------------------------

    def get(self, path: str) -> bytes | None:
        try:
            if self._sync_store is not None:
                return self._sync_store.get_sync(path)[0]
            assert self._store is not None
            return self._call(self._store.get, path)[0]  # type: ignore[no-any-return]
        except NoNodeError:
            return None

    def children(self, path: str) -> list[str]:
        try:
            if self._sync_store is not None:
                return self._sync_store.children_sync(path)
            assert self._store is not None
            return self._call(self._store.children, path)  # type: ignore[no-any-return]
        except NoNodeError:
            return []

    # ---- ledgers --------------------------------------------------------------------------

    def can_read_offloaded(self, driver: str) -> bool:
        """Whether the job was told where `driver`'s offload store is."""
        return self._offloaded is not None and self._offloaded.can_read(driver)

    def add_offloaded(self, ledger: OffloadedLedger) -> None:
        """Read this ledger from the offload store from now on (never from bookies)."""
        assert self._offloaded is not None
        self._offloaded.add(ledger)
        self._ledgers.pop(ledger.ledger_id, None)

    def _offloaded_ledger(self, ledger_id: int) -> OffloadedLedger | None:
        return None if self._offloaded is None else self._offloaded.ledgers.get(ledger_id)

    def ledger_end(self, ledger_id: int, *, refresh: bool = False) -> LedgerEnd:
        """How far a ledger can be read now (closed: all of it; open: see the module doc)."""
        offloaded = self._offloaded_ledger(ledger_id)
        if offloaded is not None:
            return LedgerEnd(offloaded.last_entry, True)
        known = self._ledgers.get(ledger_id)
        if known is not None and (known[1].closed or not refresh):
            return known[1]
        if self._no_store:  # what the driver planned with is all there is
            if known is not None:
                return known[1]
            raise LedgerError(f"ledger {ledger_id}: its metadata did not come with the split "
                              "(an open transaction reaching that far past the split's end)")
        raw = self.get(ledger_path(ledger_id))
        if raw is None:
            raise NoNodeError(f"ledger {ledger_id} has no metadata (deleted?)")
        metadata = LedgerMetadata.from_json_bytes(raw)
        if metadata.is_closed:
            end = LedgerEnd(metadata.last_entry_id, True)
        elif self._files is not None:
            end = LedgerEnd(self._files_tail(ledger_id, metadata), False)
        else:
            end = LedgerEnd(self._call(self._network_tail, ledger_id, metadata), False)
        self._ledgers[ledger_id] = (metadata, end)
        return end

    def add_shipped(self, shipped: tuple[ShippedLedger, ...]) -> None:
        """Read these ledgers with the metadata and ends the driver planned with."""
        for ledger_id, raw, last_entry, closed in shipped:
            if ledger_id not in self._ledgers:
                self._ledgers[ledger_id] = (LedgerMetadata.from_json_bytes(raw),
                                            LedgerEnd(last_entry, closed))  # fmt: skip

    def shipped(self, ledger_id: int) -> ShippedLedger:
        """What an executor needs to read `ledger_id` without the metadata store (its
        readable end as this access sees it now)."""
        end = self.ledger_end(ledger_id)
        return ledger_id, self._ledgers[ledger_id][0].to_json_bytes(), end.last_entry, end.closed

    def entry_bytes(self, ledger_id: int) -> float | None:
        """A closed or offloaded ledger's average stored bytes per entry (its length over its
        entries); None for an open ledger, whose length the metadata does not hold yet."""
        offloaded = self._offloaded_ledger(ledger_id)
        if offloaded is not None:
            return offloaded.size / max(offloaded.last_entry + 1, 1)
        end = self.ledger_end(ledger_id)
        metadata = self._ledgers[ledger_id][0]
        if not end.closed or end.last_entry < 0 or metadata.length <= 0:
            return None
        return metadata.length / (end.last_entry + 1)

    def chunk_entries(self, ledger_id: int, target_bytes: int = 8 << 20) -> int:
        """How many entries make about `target_bytes` (from a closed ledger's length)."""
        offloaded = self._offloaded_ledger(ledger_id)
        if offloaded is not None:
            average = offloaded.size / max(offloaded.last_entry + 1, 1)
            return max(2, min(256, int(target_bytes / max(average, 1.0))))
        end = self.ledger_end(ledger_id)
        metadata = self._ledgers[ledger_id][0]
        if not end.closed or end.last_entry < 0 or metadata.length <= 0:
            return 16
        average = metadata.length / (end.last_entry + 1)
        return max(2, min(256, int(target_bytes / max(average, 1.0))))

    def _files_tail(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        assert self._files is not None
        last = self._files.last_add_confirmed(ledger_id)
        if self.tail == "lac":
            return last
        while self._files.copies(ledger_id, last + 1) >= metadata.ack_quorum:
            last += 1
        return last

    async def _network_tail(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        assert self._bk is not None
        handle = await self._bk.open_ledger(ledger_id, recovery=False)  # never fence a writer
        last = handle.last_add_confirmed
        metadata = handle.metadata
        if handle.is_closed or self.tail == "lac":
            return last
        ctx = self._bk.context
        mac_key = ctx.mac_key(metadata)  # MAC'd entries need the ledger password (an error)
        while True:
            entry_id = last + 1
            copies = 0
            def request(rid: int, e: int = entry_id) -> ReadEntryRequest:
                return ReadEntryRequest(rid, ledger_id, e, False)  # fence=False: never fence

            for bookie in metadata.write_set_bookies(entry_id):
                try:
                    connection = ctx.pool.connection(bookie)
                    response = await connection.request(request)  # type: ignore[misc]
                    check_status(response, bookie)
                    assert isinstance(response, ReadEntryResponse)
                    decode_entry(response.body, ledger_id=ledger_id, entry_id=entry_id,
                                 mac_key=mac_key)
                    copies += 1
                except LedgerError:
                    continue
            if copies < metadata.ack_quorum:
                return last
            last = entry_id

    def read(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries first..last (inclusive) of a ledger, digests verified."""
        end = self.ledger_end(ledger_id)
        if last > end.last_entry:
            raise NoSuchEntryError(f"ledger {ledger_id}: entry {last} is past the readable "
                                   f"end {end.last_entry}")
        if self._offloaded_ledger(ledger_id) is not None:
            assert self._offloaded is not None
            return self._offloaded.read(ledger_id, first, last)
        if self._files is not None:
            return [self._files.read(ledger_id, e) for e in range(first, last + 1)]
        metadata = self._ledgers[ledger_id][0]
        return self._call(self._read_range, ledger_id, metadata, first,  # type: ignore[no-any-return]
                          last)

    async def _read_range(self, ledger_id: int, metadata: LedgerMetadata, first: int,
                          last: int) -> list[bytes]:  # fmt: skip
        """Through the ledger client's range read: batch reads (READ_ENTRIES) where the
        ledger allows them, else entry by entry; digests verified either way."""
        assert self._bk is not None
        return await read_range_from_bookies(self._bk.context, ledger_id, metadata, first, last)

    def iter_chunks(self, ledger_id: int, first: int, last: int, chunk: int = 128
                    ) -> Iterator[list[bytes]]:  # fmt: skip
        """Entries first..last in chunks, the next chunk read while the caller works."""
        if first > last:
            return
        if self._files is not None or self._offloaded_ledger(ledger_id) is not None:
            # files and offloaded objects: synchronous reads (the store's read-ahead works)
            for start in range(first, last + 1, chunk):
                yield self.read(ledger_id, start, min(last, start + chunk - 1))
            return
        end = self.ledger_end(ledger_id)
        if last > end.last_entry:
            raise NoSuchEntryError(f"ledger {ledger_id}: entry {last} is past the readable "
                                   f"end {end.last_entry}")
        metadata = self._ledgers[ledger_id][0]
        out: queue.Queue[object] = queue.Queue(maxsize=_PREFETCH_CHUNKS)
        cancel = trio.CancelScope()

        async def produce() -> None:
            with cancel:
                try:
                    for start in range(first, last + 1, chunk):
                        data = await self._read_range(ledger_id, metadata, start,
                                                      min(last, start + chunk - 1))
                        await _put(out, data)
                    await _put(out, _STOP)
                except Exception as exc:  # noqa: BLE001 - handed to the consumer
                    await _put(out, exc)

        self._loop.start_soon(produce)
        try:
            while True:
                item = out.get(timeout=self.timeout_s * 4)
                if item is _STOP:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item  # type: ignore[misc]
        finally:
            self._loop.run_sync(cancel.cancel)


async def _put(out: queue.Queue[object], item: object) -> None:
    while True:
        try:
            out.put_nowait(item)
            return
        except queue.Full:
            await trio.sleep(0.002)
