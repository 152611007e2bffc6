"""A checkpoint's durability order, watched at the system calls: no index record and no log mark
is written while entry-log bytes are still unsynced (in any step, in any log the checkpoint
rolled over), and no journal file is deleted before a persisted mark lies beyond it.  A kill -9
cannot show a missing fdatasync (the page cache survives it); this order is what makes a power
loss safe too."""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import trio
from hypothesis import HealthCheck, given, settings

from ledger_backend.bookie.checkpoint_mark import MARK_FILE_NAME, read_mark
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig


class SyscallOrder:
    """Bytes written and not yet fsynced, per file; the order violations seen."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.unsynced: defaultdict[str, int] = defaultdict(int)
        self.violations: list[str] = []
        self.marks_written = 0
        self.journal_files_trimmed = 0

    def _path(self, fd: int) -> str:
        return os.readlink(f"/proc/self/fd/{fd}")

    def _unsynced_entry_logs(self) -> list[str]:
        return [p for p, n in self.unsynced.items() if n and "/entrylogs/" in p]

    def wrote(self, fd: int, n: int) -> None:
        path = self._path(fd)
        if "/ledgers/index/" in path and self._unsynced_entry_logs():
            self.violations.append(f"index written with {self._unsynced_entry_logs()} unsynced")
        self.unsynced[path] += n

    def synced(self, fd: int) -> None:
        self.unsynced[self._path(fd)] = 0

    def replacing(self, dst: Any) -> None:
        if Path(dst).name != MARK_FILE_NAME:
            return
        self.marks_written += 1
        late = [p for p, n in self.unsynced.items() if n and "/ledgers/" in p]
        if late:
            self.violations.append(f"mark written with {late} unsynced")

    def unlinking(self, path: Any) -> None:
        path = Path(path)
        if path.suffix != ".jnl":
            return
        self.journal_files_trimmed += 1
        mark = read_mark(self.data_dir / "ledgers" / MARK_FILE_NAME)
        if mark is None or mark.file_id <= int(path.stem, 16):
            self.violations.append(f"journal file {path.name} deleted under mark {mark}")


def watch(monkeypatch: pytest.MonkeyPatch, order: SyscallOrder) -> None:
    real = {name: getattr(os, name) for name in
            ("write", "writev", "pwrite", "pwritev", "fsync", "fdatasync", "replace", "unlink")}

    def writer(name: str) -> Any:
        def call(fd: int, *args: Any) -> int:
            n = int(real[name](fd, *args))
            order.wrote(fd, n)
            return n
        return call

    def syncer(name: str) -> Any:
        def call(fd: int) -> None:
            real[name](fd)
            order.synced(fd)
        return call

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        order.replacing(dst)
        real["replace"](src, dst, **kwargs)

    def unlink(path: Any, **kwargs: Any) -> None:
        order.unlinking(path)
        real["unlink"](path, **kwargs)

    for name in ("write", "writev", "pwrite", "pwritev"):
        monkeypatch.setattr(os, name, writer(name))
    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, syncer(name))
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 40_000), min_size=1, max_size=60),
    ledgers=st.integers(1, 3),
    step=st.sampled_from([0, 1, 4096, 64 << 10, 1 << 20]),
    log_max=st.sampled_from([48 << 10, 256 << 10, 4 << 20]),
    checkpoints=st.integers(1, 3),
)
def test_no_index_record_mark_or_trim_before_the_entry_log_is_synced(
    tmp_path_factory: pytest.TempPathFactory, bookie_config: BookieStorageConfig,
    sizes: list[int], ledgers: int, step: int, log_max: int, checkpoints: int,
) -> None:
    data_dir = tmp_path_factory.mktemp("bookie")
    config = dataclasses.replace(
        bookie_config, data_dir=data_dir, entry_log_sync_bytes=step,
        entry_log_max_bytes=log_max, journal_max_file_bytes=64 << 10)
    order = SyscallOrder(data_dir)
    added: dict[tuple[int, int], bytes] = {}

    async def run() -> None:
        async with open_bookie_storage(config) as storage:
            for round_ in range(checkpoints):
                for i, size in enumerate(sizes):
                    ledger, entry = 1 + i % ledgers, round_ * len(sizes) + i
                    payload = bytes([entry % 251]) * size
                    await storage.add_entry(ledger, entry, entry - 1, payload)
                    added[ledger, entry] = payload
                await storage.checkpoint()
            for (ledger, entry), payload in added.items():
                assert await storage.read_entry(ledger, entry) == payload
        async with open_bookie_storage(config) as storage:  # and from the disk alone
            for (ledger, entry), payload in added.items():
                assert await storage.read_entry(ledger, entry) == payload

    with pytest.MonkeyPatch.context() as monkeypatch:
        watch(monkeypatch, order)
        trio.run(run)
    assert order.violations == []
    assert order.marks_written >= checkpoints
