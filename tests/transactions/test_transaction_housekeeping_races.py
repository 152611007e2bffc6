"""TransactionCoordinator housekeeping racing EndTxn and new transactions (found by review):
the background pass acts only on what is still Prepare* once it holds the lock, so it never
writes ABORT markers into a transaction begun since, never dies on a completed one, and a
later transaction of the same id gets its own markers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from protocols.kafka.transaction_coordinator import TransactionCoordinator, TxnState


class Store:
    def __init__(self) -> None:
        self.rows: dict[str, Any] = {}

    async def load(self) -> dict[str, Any]:
        return dict(self.rows)

    async def write(self, k: str, r: Any) -> None:
        self.rows[k] = r

    async def delete(self, k: str) -> None:
        self.rows.pop(k, None)


class Topics:
    def __init__(self) -> None:
        self.markers: list[tuple[str, int, int, bool]] = []
        self.gates: dict[str, trio.Event] = {}
        self.pid = 0
        self.fail: dict[str, int] = {}

    async def allocate_producer_id(self) -> int:
        self.pid += 1
        return self.pid

    def topics(self) -> dict[str, Any]:
        return {n: SimpleNamespace(partitions=1) for n in ("a", "x", "t")}

    async def partition(self, topic: str, partition: int) -> Any:
        owner = self

        class P:
            async def write_txn_marker(self, pid: int, epoch: int, commit: bool, ce: int) -> None:
                if owner.fail.get(topic):
                    owner.fail[topic] -= 1
                    raise OSError("partition reopening")
                gate = owner.gates.get(topic)
                if gate is not None:
                    await gate.wait()
                owner.markers.append((topic, pid, epoch, commit))
        return P()


async def test_housekeeping_after_an_end_txn_neither_dies_nor_skips_later_markers() -> None:
    topics = Topics()
    c = TransactionCoordinator(Store(), topics)  # type: ignore[arg-type]
    c._loaded = True
    pid, epoch = await c.init_producer_id("x", 60_000)
    await c.add_partitions("x", pid, epoch, [("t", 0)])
    topics.gates["t"] = trio.Event()
    errors: list[BaseException] = []

    async def housekeeping() -> None:
        try:
            await c.check_once()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    async with trio.open_nursery() as n:
        n.start_soon(c.end_transaction, "x", pid, epoch, True)
        await trio.testing.wait_all_tasks_blocked()
        assert c.transactions["x"].state is TxnState.PREPARE_COMMIT
        n.start_soon(housekeeping)  # snapshots x as PrepareCommit, waits for the lock
        await trio.testing.wait_all_tasks_blocked()
        topics.gates["t"].set()
    del topics.gates["t"]
    assert c.transactions["x"].state is TxnState.COMPLETE_COMMIT
    # the next transaction of the same id
    before = len(topics.markers)
    await c.add_partitions("x", pid, epoch, [("t", 0)])
    await c.end_transaction("x", pid, epoch, True)
    assert not errors, errors
    assert len(topics.markers) - before == 1


async def test_housekeeping_never_aborts_a_transaction_begun_since() -> None:
    topics = Topics()
    c = TransactionCoordinator(Store(), topics)  # type: ignore[arg-type]
    c._loaded = True
    c.config.marker_attempts = 1
    apid, aep = await c.init_producer_id("A", 60_000)
    xpid, xep = await c.init_producer_id("X", 60_000)
    await c.add_partitions("A", apid, aep, [("a", 0)])
    await c.add_partitions("X", xpid, xep, [("x", 0)])
    topics.gates["a"] = trio.Event()
    topics.gates["x"] = trio.Event()
    crash: list[BaseException] = []

    async def housekeeping() -> None:
        try:
            await c.check_once()
        except BaseException as exc:  # noqa: BLE001
            crash.append(exc)

    topics.fail["a"] = 1
    await c.end_transaction("A", apid, aep, True)  # markers fail: stays PrepareCommit
    assert c.transactions["A"].state is TxnState.PREPARE_COMMIT
    async with trio.open_nursery() as n:
        n.start_soon(c.end_transaction, "X", xpid, xep, True)
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(housekeeping)  # snapshot: A and X both PrepareCommit
        await trio.testing.wait_all_tasks_blocked()
        topics.gates["x"].set()      # X's EndTxn finishes
        await trio.testing.wait_all_tasks_blocked()
        assert c.transactions["X"].state is TxnState.COMPLETE_COMMIT
        # X's producer starts its next transaction and produces into x-0
        await c.add_partitions("X", xpid, xep, [("x", 0)])
        assert c.transactions["X"].state is TxnState.ONGOING
        topics.gates["a"].set()      # A finishes; housekeeping then reaches X
    assert not crash, crash
    stray = [m for m in topics.markers if m[0] == "x" and not m[3]]
    assert not stray, f"ABORT marker written into X's ongoing transaction: {stray}"
