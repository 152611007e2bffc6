"""Write cache (two bounded generations, sorted flush) and read cache (LRU, bounded)."""

from __future__ import annotations

from ledger_backend.bookie.read_cache import ReadCache
from ledger_backend.bookie.write_cache import WriteCache, sorted_entries


def test_write_cache_generations_and_bound() -> None:
    cache = WriteCache(max_bytes=1000)  # 500 per generation
    assert cache.has_room_for(10_000)  # an empty generation takes even an oversize entry
    cache.put(2, 1, b"b" * 200)
    cache.put(1, 5, b"a" * 200)
    assert not cache.has_room_for(200)
    flushing = cache.start_flush()
    assert cache.get(1, 5) == b"a" * 200  # still served while flushing
    cache.put(1, 5, b"new")  # newer version in the active generation wins
    assert cache.get(1, 5) == b"new"
    assert [(led, e) for led, e, _ in sorted_entries(flushing)] == [(1, 5), (2, 1)]
    assert cache.max_entry_id(2) == 1
    cache.abort_flush()  # failed flush: merged back, newest kept
    assert cache.flushing is None and cache.get(1, 5) == b"new" and cache.get(2, 1) == b"b" * 200
    cache.drop_ledger(2)
    assert cache.get(2, 1) is None and cache.active_bytes == 3


def test_read_cache_lru_and_bound() -> None:
    cache = ReadCache(max_bytes=300)
    for e in range(3):
        cache.put(1, e, bytes(100))
    assert cache.get(1, 0) is not None  # 0 becomes most recent
    cache.put(1, 3, bytes(100))
    assert cache.get(1, 1) is None and cache.get(1, 0) is not None
    assert cache.size <= 300
    cache.put(2, 0, bytes(1000))  # bigger than the whole cache: not kept
    assert cache.get(2, 0) is None
    cache.drop_ledger(1)
    assert len(cache) == 0 and cache.size == 0
