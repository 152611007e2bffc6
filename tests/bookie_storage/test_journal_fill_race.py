"""A zero fill held in the middle of one of its steps while groups are placed over it: once it
goes on, no zero lands on a group's bytes (the step under way ends before the groups write, the
steps after it stop below them), and every acknowledged record replays, in order."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from test_bookie_journal import scan_all

from ledger_backend.bookie.journal import Journal
from ledger_backend.bookie.journal_format import TYPE_ADD
from ledger_backend.bookie.journal_preallocation import ZeroFill

MiB = 1 << 20


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    held_step=st.integers(1, 4),  # the fill (4 MiB: four 1 MiB steps) is held before this one
    sizes=st.lists(st.integers(1, 3 * MiB // 2), min_size=1, max_size=5),
)
def test_groups_placed_over_a_held_fill_step_are_never_zeroed(
    tmp_path_factory: pytest.TempPathFactory, held_step: int, sizes: list[int]
) -> None:
    directory = tmp_path_factory.mktemp("journal")
    payloads = [bytes([1 + i % 250]) * size for i, size in enumerate(sizes)]
    at_gate, go_on = threading.Event(), threading.Event()
    steps = [0]
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:  # only the zero fill uses pwrite
        steps[0] += 1
        if steps[0] == held_step:
            at_gate.set()
            go_on.wait(30)
        return real_pwrite(fd, data, offset)

    async def run() -> list[int]:
        journal = Journal(directory, first_file_id=1, fsync=False, preallocate_bytes=4 * MiB,
                          max_file_bytes=64 * MiB, max_writes_in_flight=2,
                          flush_when_queue_empty=True)
        await journal.open()
        fill = journal._zero_fill
        real_wait, waiting = fill.wait_for_step, threading.Semaphore(0)

        def wait_for_step() -> None:  # a group's thread, about to take the step lock
            waiting.release()
            real_wait()

        fill.wait_for_step = wait_for_step  # type: ignore[method-assign]
        acked: list[int] = []
        all_acked = trio.Event()

        def on_done(i: int, error: BaseException | None) -> None:
            assert error is None
            acked.append(i)
            if len(acked) == len(payloads):
                all_acked.set()

        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)  # starts the fill of the first chunk
            await trio.to_thread.run_sync(at_gate.wait, 30)
            for i, payload in enumerate(payloads):  # one group each, placed over the fill
                journal.append_soon(TYPE_ADD, 1, i, i - 1, payload,
                                    lambda error, i=i: on_done(i, error))
                # with a cushion, the pass ends with no task runnable: the group starts alone
                await trio.testing.wait_all_tasks_blocked(0.001)
            for _ in range(min(2, len(payloads))):  # the two groups in flight reached the lock
                assert await trio.to_thread.run_sync(waiting.acquire, True, 30)
            await trio.sleep(0.02)  # (a broken lock would let them write now, under the step)
            assert not acked  # none is written while the fill's step is held
            go_on.set()
            with trio.fail_after(60):
                await all_acked.wait()
            nursery.cancel_scope.cancel()
        return acked

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(os, "pwrite", pwrite)
        acked = trio.run(run)
    assert acked == list(range(len(payloads)))  # released in start order
    records, stop = scan_all(directory)
    assert stop.clean, stop
    assert [r.payload for r in records] == payloads


def test_the_fill_race_test_holds_a_step(tmp_path: Path) -> None:
    """The gate above holds one step of several: a 4 MiB fill writes in 1 MiB pwrite steps."""
    writes: list[int] = []
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:
        writes.append(len(data))
        return real_pwrite(fd, data, offset)

    fill = ZeroFill(4 * MiB)
    fd = os.open(tmp_path / "file", os.O_RDWR | os.O_CREAT)
    try:
        start, end = fill.next_range(16, 64 * MiB) or (0, 0)
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setattr(os, "pwrite", pwrite)
            assert fill.fill(fd, start, end, False) == end == 16 + 4 * MiB
    finally:
        os.close(fd)
    assert writes == [MiB] * 4
