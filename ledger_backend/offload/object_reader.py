"""Reading entry ranges of offloaded ledgers: footer, index, then only the blocks needed.

Indexes (small) and decoded blocks are kept in one LRU cache bounded in bytes. A miss reads
ahead: the blocks that follow the missed one in the object (they are contiguous) come in the same
range request, up to `readahead_bytes` (at most a quarter of the cache), so a consumer reading a
ledger in order makes one store request per read-ahead window, not one per block. A missing
object, an unreachable store or a corrupt part (bad magic, version or CRC) raises
OffloadedReadError naming the object (OffloadedObjectDamagedError when it is missing or
corrupt: retrying will not help) and logs one rate-limited WARNING line per object; a reader
never returns a byte it could not verify. This module never writes to the store.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

import trio

from ledger_backend.offload.object_format import (
    FOOTER_SIZE,
    HEADER_SIZE,
    BlockRef,
    ObjectFormatError,
    ObjectIndex,
    decode_block,
    decode_footer,
    decode_header,
    decode_index,
)
from ledger_backend.offload.offloader import (
    ObjectStoreUnavailableError,
    OffloadedObjectDamagedError,
    OffloadedReadError,
    Offloader,
    OffloadError,
)

log = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 64 << 20
DEFAULT_READAHEAD_BYTES = 4 << 20


@dataclass(frozen=True)
class OffloadLocation:
    """Where one ledger's object lives, as its metadata records it."""

    driver: str
    key: str
    size: int
    # where the driver's store is, as recorded (OffloadRecord.location); () = the configured
    place: tuple[tuple[str, str], ...] = ()


class OffloadedReader:
    """Range reads of offloaded ledgers through a byte-bounded LRU cache."""

    def __init__(
        self,
        offloaders: dict[str, Offloader],
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        readahead_bytes: int = DEFAULT_READAHEAD_BYTES,
    ) -> None:
        self._offloaders = offloaders
        self._cache_bytes = cache_bytes
        self._readahead_bytes = max(0, min(readahead_bytes, cache_bytes // 4))
        self._cache: OrderedDict[tuple[str, int], tuple[object, int]] = OrderedDict()
        self._used = 0
        self._elsewhere: dict[tuple[str, tuple[tuple[str, str], ...]], Offloader] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._warned: dict[str, float] = {}
        self.errors = 0
        self.store_reads = 0  # range requests to the object store (cache misses)
        self.store_read_seconds = 0.0  # time spent in them (latency = seconds / reads)

    def _warn(self, key: str, message: str, *args: object) -> None:
        # one line per object per 10 s: a consumer retrying a bad object must not flood the log
        now = time.monotonic()
        if now - self._warned.get(key, -1e9) >= 10.0:
            self._warned[key] = now
            log.warning(message, *args)

    def _offloader(self, where: OffloadLocation) -> Offloader:
        offloader = self._offloaders.get(where.driver)
        if offloader is None:
            raise OffloadedReadError(
                f"object {where.key!r}: driver {where.driver!r} is not configured "
                f"(configured: {sorted(self._offloaders) or 'none'})"
            )
        if not where.place or dict(where.place) == offloader.location_fields:
            return offloader
        # recorded at a location [offload] no longer names: read it from there
        key = (where.driver, where.place)
        found = self._elsewhere.get(key)
        if found is None:
            try:
                found = self._elsewhere[key] = offloader.at(dict(where.place))
            except (KeyError, ValueError) as exc:
                raise OffloadedReadError(
                    f"object {where.key!r}: recorded location {dict(where.place)} is not "
                    f"usable: {exc!r}") from exc
        return found

    def _get(self, key: tuple[str, int]) -> object | None:
        item = self._cache.get(key)
        if item is None:
            return None
        self._cache.move_to_end(key)
        return item[0]

    def _put(self, key: tuple[str, int], value: object, size: int) -> None:
        if key in self._cache or size > self._cache_bytes:
            return
        self._cache[key] = (value, size)
        self._used += size
        while self._used > self._cache_bytes and self._cache:
            _, (_, dropped) = self._cache.popitem(last=False)
            self._used -= dropped

    def drop(self, key: str) -> None:
        for cache_key in [k for k in self._cache if k[0] == key]:
            _, size = self._cache.pop(cache_key)
            self._used -= size

    async def read(
        self, where: OffloadLocation, ledger_id: int, first: int, last: int
    ) -> list[bytes]:
        """Entries first..last of the ledger stored at `where` (see the module docstring)."""
        try:
            offloader = self._offloader(where)
            index = await self._index(offloader, where, ledger_id)
            out: list[bytes] = []
            for ref in index.blocks_for(first, last):
                entries = await self._block(offloader, where, index, ref)
                lo = max(first, ref.first_entry) - ref.first_entry
                hi = min(last, ref.last_entry) - ref.first_entry
                out.extend(entries[lo : hi + 1])
            return out
        except (OffloadError, ObjectFormatError, ValueError) as exc:
            self.errors += 1
            self._warn(
                where.key,
                "offloaded ledger %d: reading entries %d..%d of object %r (%s) failed: %s",
                ledger_id, first, last, where.key, where.driver, exc,
            )
            if isinstance(exc, OffloadedReadError):
                raise
            error = (OffloadedReadError if isinstance(exc, ObjectStoreUnavailableError)
                     else OffloadedObjectDamagedError)  # missing, or failed a check
            raise error(f"offloaded ledger {ledger_id}: object {where.key!r}: {exc}") from exc

    async def _get_range(self, offloader: Offloader, key: str, start: int, length: int) -> bytes:
        began = time.monotonic()
        try:
            return await offloader.get_range(key, start, length)
        finally:
            self.store_reads += 1
            self.store_read_seconds += time.monotonic() - began

    async def _index(
        self, offloader: Offloader, where: OffloadLocation, ledger_id: int
    ) -> ObjectIndex:
        cached = self._get((where.key, -1))
        if isinstance(cached, ObjectIndex):
            return cached
        lock = self._locks.setdefault(where.key, trio.Lock())
        async with lock:
            cached = self._get((where.key, -1))
            if isinstance(cached, ObjectIndex):
                return cached
            if where.size < HEADER_SIZE + FOOTER_SIZE:
                raise ObjectFormatError(f"recorded size {where.size} is too small")
            head = await self._get_range(offloader, where.key, 0, HEADER_SIZE)
            if decode_header(head) != ledger_id:
                raise ObjectFormatError(f"object holds another ledger than {ledger_id}")
            tail = await self._get_range(
                offloader, where.key, where.size - FOOTER_SIZE, FOOTER_SIZE
            )
            index_offset, index_length, entries, data_bytes = decode_footer(tail)
            if index_offset + index_length + FOOTER_SIZE != where.size:
                raise ObjectFormatError("footer does not match the recorded object size")
            raw = await self._get_range(offloader, where.key, index_offset, index_length)
            index = decode_index(raw, ledger_id, entries, data_bytes, index_offset)
            self._put((where.key, -1), index, len(raw) + 64)
            self._locks.pop(where.key, None)
            return index

    async def _block(
        self, offloader: Offloader, where: OffloadLocation, index: ObjectIndex, ref: BlockRef
    ) -> list[bytes]:
        cached = self._get((where.key, ref.offset))
        if isinstance(cached, list):
            return cached
        run = self._readahead_run(where, index, ref)
        start = run[0].offset
        raw = await self._get_range(
            offloader, where.key, start, run[-1].offset + run[-1].length - start
        )
        view = memoryview(raw)  # blocks are decoded from views of the range read, not copies
        wanted: list[bytes] = []
        for block in run:
            part = view[block.offset - start : block.offset - start + block.length]
            if block is ref:
                entries = wanted = decode_block(part, block)  # its damage is this read's error
            else:
                try:
                    entries = decode_block(part, block)
                except ObjectFormatError:
                    continue  # a damaged later block fails only a read that wants it
            self._put((where.key, block.offset), entries, block.length + 32 * block.count)
        return wanted

    def _readahead_run(
        self, where: OffloadLocation, index: ObjectIndex, ref: BlockRef
    ) -> list[BlockRef]:
        """`ref` and the uncached blocks right after it, within the read-ahead budget."""
        run = [ref]
        budget = self._readahead_bytes - ref.length
        position = bisect.bisect_left([b.offset for b in index.blocks], ref.offset) + 1
        for block in index.blocks[position:]:
            if block.length > budget or (where.key, block.offset) in self._cache:
                break
            if block.offset != run[-1].offset + run[-1].length:
                break  # not contiguous (never in format v1; a guard, not a case)
            run.append(block)
            budget -= block.length
        return run
