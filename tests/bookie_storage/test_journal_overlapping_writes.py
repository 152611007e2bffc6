"""Journal group writes that overlap (max_writes_in_flight > 1): a group starts while an earlier
one is still being fsynced, yet groups are released strictly in the order they started, a
failed earlier group fails the later ones, and what is on disk replays as one gapless log."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from ledger_backend.bookie.journal import Journal, JournalFailedError
from ledger_backend.bookie.journal_format import TYPE_ADD, LogMark, list_journal_files
from ledger_backend.bookie.journal_scanner import JournalScanner


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll a condition that worker threads change (no Trio event announces it)."""
    with trio.fail_after(10):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.001)


class GatedFsyncs:
    """os.fdatasync replaced: call i notes that it started, then waits until the test opens
    gate i; `fail` holds the calls that raise EIO instead of syncing."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: frozenset[int] = frozenset()
                 ) -> None:  # fmt: skip
        self.started = 0
        self.gates = [threading.Event() for _ in range(8)]
        self.fail = fail
        self._lock = threading.Lock()
        real = os.fdatasync

        def gated(fd: int) -> None:
            with self._lock:
                call = self.started
                self.started += 1
            if not self.gates[call].wait(30):
                raise OSError(5, "test gate never opened")
            if call in self.fail:
                raise OSError(5, "Input/output error")
            real(fd)

        monkeypatch.setattr(os, "fdatasync", gated)

    async def wait_started(self, count: int) -> None:
        await wait_until(lambda: self.started >= count)


async def wait_write_returned(journal: Journal, index: int) -> None:
    """Until the worker of the index-th group still held unreleased has delivered its result."""
    await wait_until(lambda: journal._writing[index].write_result is not None)  # noqa: SLF001


async def open_journal(directory: Path, writes_in_flight: int, max_file_bytes: int = 1 << 20
                       ) -> Journal:  # fmt: skip
    """An opened journal in `directory` that flushes whenever its queue is empty."""
    journal = Journal(directory, first_file_id=1, flush_when_queue_empty=True,
                      max_writes_in_flight=writes_in_flight, max_file_bytes=max_file_bytes)
    await journal.open()
    return journal


Done = list[tuple[bytes, BaseException | None]]


async def start_two_fsyncing_groups(journal: Journal, fsyncs: GatedFsyncs, first: bytes,
                                    second: bytes, done: Done) -> None:  # fmt: skip
    """Adds `first`, waits for its group's fsync to start, then adds `second` and waits for
    its group's fsync too: two groups are fsynced at once. Each callback appends (payload,
    error) to `done`."""
    journal.append_soon(TYPE_ADD, 1, 0, -1, first, lambda e: done.append((first, e)))
    await fsyncs.wait_started(1)
    journal.append_soon(TYPE_ADD, 1, 1, 0, second, lambda e: done.append((second, e)))
    await fsyncs.wait_started(2)


def scan(directory: Path) -> tuple[list[bytes], bool]:
    scanner = JournalScanner(directory, LogMark(0, 0))
    payloads: list[bytes] = []
    while batch := scanner.next_batch(1 << 20):
        payloads.extend(r.payload for r, _ in batch)
    scanner.close()
    assert scanner.stop is not None
    return payloads, scanner.stop.clean


async def test_a_later_group_fsynced_first_waits_for_the_earlier_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = await open_journal(tmp_path, writes_in_flight=2)
    fsyncs = GatedFsyncs(monkeypatch)
    done: Done = []
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        await start_two_fsyncing_groups(journal, fsyncs, b"first", b"second", done)
        fsyncs.gates[1].set()
        await wait_write_returned(journal, 1)
        await trio.lowlevel.checkpoint()
        assert done == []  # the second is on disk, the first not yet: nothing acknowledged
        assert journal.written_mark.offset == 16  # nothing past the file header
        fsyncs.gates[0].set()
        await wait_until(lambda: len(done) == 2)
        nursery.cancel_scope.cancel()
    assert done == [(b"first", None), (b"second", None)]
    assert journal.groups_written == 2
    assert scan(tmp_path) == ([b"first", b"second"], True)


async def test_an_earlier_failed_group_fails_a_later_fsynced_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = await open_journal(tmp_path, writes_in_flight=2)
    fsyncs = GatedFsyncs(monkeypatch, fail=frozenset({0}))
    done: Done = []
    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            await start_two_fsyncing_groups(journal, fsyncs, b"lost", b"after", done)
            fsyncs.gates[1].set()  # the later group's fsync succeeds first
            await wait_write_returned(journal, 1)
            fsyncs.gates[0].set()  # then the earlier one fails
    assert info.group_contains(OSError)
    assert [payload for payload, _ in done] == [b"lost", b"after"]
    assert all(isinstance(error, JournalFailedError) for _, error in done)
    assert journal.failed and journal.groups_written == 0


async def test_overlapping_writes_and_rollovers_replay_as_one_gapless_log(
    tmp_path: Path,
) -> None:
    """Many adders, four writes in flight, a file every few groups: every acknowledged record
    replays, in journal order, with no hole between groups or files."""
    journal = await open_journal(tmp_path, writes_in_flight=4, max_file_bytes=8192)
    acked: list[int] = []

    async def adder(first: int) -> None:
        for i in range(first, first + 30):
            await journal.append(TYPE_ADD, 1, i, -1, i.to_bytes(4, "big") * 100)
            acked.append(i)

    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        with trio.fail_after(60):
            async with trio.open_nursery() as adders:
                for first in range(0, 240, 30):
                    adders.start_soon(adder, first)
        nursery.cancel_scope.cancel()
    payloads, clean = scan(tmp_path)
    assert clean
    assert sorted(int.from_bytes(p[:4], "big") for p in payloads) == list(range(240))
    assert len(list_journal_files(tmp_path)) > 5
    assert journal.written_mark.file_id == list_journal_files(tmp_path)[-1]
    assert sorted(acked) == list(range(240))


async def test_a_group_that_starts_the_next_file_waits_for_writes_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker that starts a new file replaces the file every worker writes to: it runs
    only once no write is in flight, and nothing starts beside it."""
    journal = await open_journal(tmp_path, writes_in_flight=4, max_file_bytes=4096)
    fsyncs = GatedFsyncs(monkeypatch)
    done: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        journal.append_soon(TYPE_ADD, 1, 0, -1, b"a" * 3000, lambda e: done.append(0))
        await fsyncs.wait_started(1)
        journal.append_soon(TYPE_ADD, 1, 1, 0, b"b" * 3000, lambda e: done.append(1))
        for _ in range(20):  # the journal task and any worker had their chance to start it
            await trio.sleep(0.005)
        assert fsyncs.started == 1 and len(list_journal_files(tmp_path)) == 1
        for gate in fsyncs.gates:
            gate.set()
        await wait_until(lambda: len(done) == 2)
        nursery.cancel_scope.cancel()
    assert done == [0, 1]
    assert len(list_journal_files(tmp_path)) == 2
    payloads, clean = scan(tmp_path)
    assert clean and payloads == [b"a" * 3000, b"b" * 3000]
