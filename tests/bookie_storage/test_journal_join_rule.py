"""The queue-empty trigger's join rule never releases an add before its group's fdatasync.

An add that opens a group on an idle journal has its write started at the end of a scheduler
pass (Journal._pass_ended, a Trio instrument hook) when the last group held one record, else
after a checkpoint of the journal task or of the waiting add itself.  Adders here come from many
tasks, both append (waiting) and append_soon (callback), at random points, while writes and
fdatasyncs are in flight (each fdatasync is slowed so adds keep arriving during them).  Every
fdatasync notes the records that were on disk before it began (a scan of the journal files):
those are durable once it returns.  Every acknowledgement must find its record among them.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest
import trio
from test_bookie_journal import scan_all

from ledger_backend.bookie.journal import Journal
from ledger_backend.bookie.journal_format import TYPE_ADD

ADDERS = 6
ADDS_EACH = 100


def watch_fdatasync(monkeypatch: pytest.MonkeyPatch, directory: Path) -> set[tuple[int, int]]:
    """(ledger, entry) of every record an fdatasync that returned covered."""
    durable: set[tuple[int, int]] = set()
    lock = threading.Lock()
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        written = {(r.ledger_id, r.entry_id) for r in scan_all(directory)[0]}
        time.sleep(0.001)  # adds keep arriving while it runs
        real_fdatasync(fd)
        with lock:
            durable.update(written)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return durable


@pytest.mark.parametrize(("writes_in_flight", "preallocate"), [(1, 0), (2, 0), (1, 64 << 10)])
async def test_no_add_is_released_before_its_groups_fdatasync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes_in_flight: int, preallocate: int
) -> None:
    journal = Journal(tmp_path, first_file_id=1, flush_when_queue_empty=True,
                      max_writes_in_flight=writes_in_flight, preallocate_bytes=preallocate)
    await journal.open()
    durable = watch_fdatasync(monkeypatch, tmp_path)
    acked: list[tuple[int, int]] = []
    early: list[tuple[int, int]] = []
    soon_done = trio.Event()
    soon_count = [0, 0]  # started, acknowledged

    def acknowledged(key: tuple[int, int], error: BaseException | None = None) -> None:
        assert error is None
        acked.append(key)
        if key not in durable:
            early.append(key)

    def soon_acknowledged(key: tuple[int, int], error: BaseException | None) -> None:
        acknowledged(key, error)
        soon_count[1] += 1
        if soon_count[1] == soon_count[0]:
            soon_done.set()

    async def adder(ledger_id: int) -> None:
        rng = random.Random(ledger_id)
        for entry in range(ADDS_EACH):
            key = (ledger_id, entry)
            payload = bytes([entry % 251]) * rng.randrange(1, 3000)
            if rng.random() < 0.5:
                await journal.append(TYPE_ADD, ledger_id, entry, entry - 1, payload)
                acknowledged(key)
            else:
                soon_count[0] += 1
                journal.append_soon(TYPE_ADD, ledger_id, entry, entry - 1, payload,
                                    lambda error, key=key: soon_acknowledged(key, error))
            for _ in range(rng.randrange(3)):  # join now, a pass later, or two
                await trio.lowlevel.checkpoint()
            if rng.random() < 0.2:
                await trio.sleep(rng.random() / 1000)  # and now and then an idle journal

    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        with trio.fail_after(60):
            async with trio.open_nursery() as adders:
                for ledger_id in range(1, ADDERS + 1):
                    adders.start_soon(adder, ledger_id)
            if soon_count[0]:
                await soon_done.wait()
        nursery.cancel_scope.cancel()
    assert not early, f"{len(early)} adds released before an fdatasync covered them"
    assert sorted(acked) == sorted(set(acked)) and len(acked) == ADDERS * ADDS_EACH
    assert journal.triggers["queue_empty"] + journal.triggers["bytes"] == journal.groups_written
    assert journal.groups_written < ADDERS * ADDS_EACH  # adds did join groups
