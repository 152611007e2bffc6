"""What the [storage] settings mean for one bookie's storage engine.

One mapping for every bookie a user starts: the standalone's own (gateway/process/
local_bookies.py) and `ledgerwire bookie` (gateway/cli/commands/bookie.py, which reads the same
[storage] table and has a flag for each setting below), so a bookie run on its own never falls
back to engine defaults that differ from the standalone's (its write cache was 64 MiB there,
256 MiB in a standalone).

The settings that reach the engine: fsync, journal_max_group_wait_ms,
journal_writes_in_flight, write_cache_mb, read_cache_mb, entry_log_max_mb,
journal_max_file_mb, journal_preallocate_mb.  The other [storage] settings are a broker's
(quorums, ledger sizes, open partitions), the standalone's (how many bookies, on which
ports), or reach a separate bookie by its own flags (address, secret, TLS, ledger password).
"""

from __future__ import annotations

from pathlib import Path

from gateway.config.settings import StorageConfig
from ledger_backend.bookie.storage_api import BookieStorageConfig

# [storage] setting -> `ledgerwire bookie` flag help, for each setting the engine takes
ENGINE_SETTINGS: dict[str, str] = {
    "journal_max_group_wait_ms": "longest wait to gather a journal group before its write",
    "journal_writes_in_flight": "journal group writes that may overlap (1: one at a time)",
    "write_cache_mb": "entries held in memory until the next checkpoint writes them",
    "read_cache_mb": "entries read from entry logs kept in memory",
    "entry_log_max_mb": "an entry log rolls at this size (GC frees whole logs)",
    "journal_max_file_mb": "a journal file rolls at this size",
    "journal_preallocate_mb": "zero-fill journal files this far ahead of their writes; 0: off",
}


def bookie_engine_config(storage: StorageConfig, data_dir: Path) -> BookieStorageConfig:
    """The storage engine of a bookie keeping its data in `data_dir`."""
    return BookieStorageConfig(
        data_dir=data_dir,
        fsync=storage.fsync,
        journal_max_group_wait_s=storage.journal_max_group_wait_ms / 1000.0,
        journal_writes_in_flight=storage.journal_writes_in_flight,
        write_cache_bytes=storage.write_cache_mb << 20,
        read_cache_bytes=storage.read_cache_mb << 20,
        entry_log_max_bytes=storage.entry_log_max_mb << 20,
        journal_max_file_bytes=storage.journal_max_file_mb << 20,
        journal_preallocate_bytes=storage.journal_preallocate_mb << 20,
    )
