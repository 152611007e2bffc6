"""A checkpoint writes the entry log in fdatasynced steps, not in one burst: a journal
fdatasync meeting one large writeback on the shared disk waited tens of ms, and every
acknowledgement with it (benchmarks/bench_kafka.py's produce latency p99 at 20 MB/s)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig


async def _checkpoint_syncs(config: BookieStorageConfig, monkeypatch: pytest.MonkeyPatch,
                            payloads: list[bytes]) -> list[int]:
    """Bytes written since the previous fdatasync, at each fdatasync of one checkpoint."""
    async with open_bookie_storage(config) as storage:
        for i, payload in enumerate(payloads):
            await storage.add_entry(3, i, i - 1, payload)
        # bytes written to the entry log since its last fdatasync, at each fdatasync
        unsynced = [0]
        at_sync: list[int] = []
        real_pwritev, real_fdatasync = os.pwritev, os.fdatasync

        def pwritev(fd: int, buffers: list[bytes], offset: int) -> int:
            written = real_pwritev(fd, buffers, offset)
            unsynced[0] += written
            return written

        def fdatasync(fd: int) -> None:
            real_fdatasync(fd)
            if unsynced[0]:
                at_sync.append(unsynced[0])
            unsynced[0] = 0

        monkeypatch.setattr(os, "pwritev", pwritev)
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        await storage.checkpoint()
        monkeypatch.undo()
        for i, payload in enumerate(payloads):
            assert await storage.read_entry(3, i) == payload
    return at_sync


async def test_a_checkpoint_syncs_the_entry_log_at_least_every_step(
    bookie_config: BookieStorageConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = dataclasses.replace(bookie_config, entry_log_sync_bytes=64 << 10)
    payloads = [bytes([i % 251]) * 10_000 for i in range(40)]  # ~400 KB: ~6 steps
    at_sync = await _checkpoint_syncs(config, monkeypatch, payloads)
    assert sum(at_sync) >= sum(map(len, payloads))
    assert len(at_sync) >= 6, at_sync
    # each step is at most one step plus the entry that crossed it (and its header)
    assert max(at_sync) <= (64 << 10) + 10_000 + 4096, at_sync


async def test_a_large_checkpoint_takes_at_most_about_sixteen_steps(
    bookie_config: BookieStorageConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = dataclasses.replace(bookie_config, entry_log_sync_bytes=1024)
    payloads = [bytes([i % 251]) * 10_000 for i in range(64)]  # 640 entries' worth of steps
    at_sync = await _checkpoint_syncs(config, monkeypatch, payloads)
    assert 12 <= len(at_sync) <= 20, at_sync


async def test_a_step_of_zero_writes_a_checkpoint_in_one_go(
    bookie_config: BookieStorageConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = dataclasses.replace(bookie_config, entry_log_sync_bytes=0)
    async with open_bookie_storage(config) as storage:
        for i in range(20):
            await storage.add_entry(3, i, i - 1, b"x" * 10_000)
        syncs: list[int] = []
        real_fdatasync = os.fdatasync
        monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real_fdatasync(fd)))
        await storage.checkpoint()
        monkeypatch.undo()
        assert await storage.read_entry(3, 19) == b"x" * 10_000
        # the entry log once; the index log and the mark may sync too, but no step of the log
        assert len(syncs) <= 3, syncs
