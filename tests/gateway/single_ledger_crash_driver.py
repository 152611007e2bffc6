"""Crash-test driver for moving single coordinator ledgers into partition ledgers
(gateway/coordinator/single_ledger_migration.py), on a durable bookie and the on-disk store.

    python -m tests.gateway.single_ledger_crash_driver DATA_DIR PORT legacy|move|verify

`legacy` writes a data directory of the old layout: committed offsets, group records and
deletions in the single offsets ledger (snapshots among them), transaction records and
deletions in the single transaction ledger, and (as an older version run with workers left
them) entries in two partition ledgers.  `move` runs the move (the test sets
LEDGERWIRE_CRASH_AT / _AFTER to kill it at a step) and prints "DONE".  `verify` prints one JSON
line: what every partition ledger holds, which keys sit in a partition they do not belong to,
and whether the single ledgers still exist.  `expected()` is what verify must print.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio

from gateway.cluster.broker_registry import ClusterLayout
from gateway.cluster.bundle_placement import coordinator_partition
from gateway.coordinator.offset_store import (
    KAFKA_OFFSETS_LEDGER,
    LedgerOffsetStore,
    group_ledger_name,
)
from gateway.coordinator.single_ledger_migration import move_single_ledgers
from gateway.coordinator.transaction_store import (
    TRANSACTION_STATE_LEDGER,
    LedgerTransactionStore,
    transaction_ledger_name,
)
from ledger_backend.managed_ledger import ManagedLedgerFactory
from protocols.kafka.group_coordinator import CommittedOffset
from tests.managed_ledger.crash_support import durable_node, emit

GROUPS = 40
TXNS = 20
LAYOUT = ClusterLayout()


def _offset(value: int) -> CommittedOffset:
    return CommittedOffset(value, -1, "", 1000)


def expected() -> dict[str, Any]:
    """What verify must find: every legacy entry in its partition, over the older partition
    entries for the same keys; those for other keys kept."""
    offsets: dict[str, dict[str, int]] = {
        "group-1": {"u/0": 55}, "workers-only": {"t/0": 9}}
    groups: dict[str, Any] = {"workers-only": {"gen": -1}}
    for g in range(GROUPS):
        gid = f"group-{g}"
        mine = offsets.setdefault(gid, {})
        mine.update({f"t/{p}": 100 * g + p for p in range(3)})
        if g % 5 == 0:
            mine["t/0"] = 7000 + g
        if g % 7 == 0:
            del mine["t/2"]
        if g % 3 == 0:
            groups[gid] = {"gen": g}
    txns = {f"txn-{i}": {"state": "Ongoing", "n": i} for i in range(TXNS) if i % 4}
    txns["workers-txn"] = {"state": "Empty", "n": -1}
    return {"offsets": offsets, "groups": groups, "txns": txns, "misplaced": [],
            "single_ledgers": [False, False]}


async def write_legacy(factory: ManagedLedgerFactory) -> None:
    # entries an older version's workers left in partition ledgers
    for gid, rows in (("group-1", {("t", 0): 1, ("u", 0): 55}), ("workers-only", {("t", 0): 9})):
        part = LedgerOffsetStore(factory, None, ledger_name=group_ledger_name(
            coordinator_partition(gid, LAYOUT.group_partitions)))
        await part.load()
        await part.commit(gid, {k: _offset(v) for k, v in rows.items()})
        if gid == "workers-only":
            await part.store_group(gid, {"gen": -1})
        await part.close()
    txn_part = LedgerTransactionStore(factory, None, ledger_name=transaction_ledger_name(
        coordinator_partition("workers-txn", LAYOUT.txn_partitions)))
    await txn_part.load()
    await txn_part.write("workers-txn", {"state": "Empty", "n": -1})
    await txn_part.close()
    # the single ledgers, snapshots among their records
    offsets = LedgerOffsetStore(factory, None, snapshot_every=25)
    await offsets.load()
    for g in range(GROUPS):
        gid = f"group-{g}"
        await offsets.commit(gid, {("t", p): _offset(100 * g + p) for p in range(3)})
        if g % 3 == 0:
            await offsets.store_group(gid, {"gen": g})
        if g % 5 == 0:
            await offsets.commit(gid, {("t", 0): _offset(7000 + g)})
        if g % 7 == 0:
            await offsets.delete(gid, [("t", 2)])
    await offsets.close()
    txns = LedgerTransactionStore(factory, None, snapshot_every=15)
    await txns.load()
    for i in range(TXNS):
        await txns.write(f"txn-{i}", {"state": "Ongoing", "n": i})
        if i % 4 == 0:
            await txns.delete(f"txn-{i}")
    await txns.close()


async def read_partitions(factory: ManagedLedgerFactory) -> dict[str, Any]:
    out: dict[str, Any] = {"offsets": {}, "groups": {}, "txns": {}, "misplaced": []}
    for i in range(LAYOUT.group_partitions):
        store = LedgerOffsetStore(factory, None, ledger_name=group_ledger_name(i))
        state = await store.load()
        groups = await store.load_groups()
        await store.close()
        for gid, rows in state.items():
            out["offsets"][gid] = {f"{t}/{p}": o.offset for (t, p), o in sorted(rows.items())}
        out["groups"].update(groups)
        out["misplaced"] += [g for g in {*state, *groups}
                             if coordinator_partition(g, LAYOUT.group_partitions) != i]
    for i in range(LAYOUT.txn_partitions):
        txn_store = LedgerTransactionStore(factory, None, ledger_name=transaction_ledger_name(i))
        txns = await txn_store.load()
        await txn_store.close()
        out["txns"].update(txns)
        out["misplaced"] += [t for t in txns
                             if coordinator_partition(t, LAYOUT.txn_partitions) != i]
    out["single_ledgers"] = [await factory.exists(KAFKA_OFFSETS_LEDGER),
                             await factory.exists(TRANSACTION_STATE_LEDGER)]
    return out


async def main(data_dir: Path, port: int, phase: str) -> None:
    async with durable_node(data_dir, port) as (store, bk):
        factory = ManagedLedgerFactory(store, bk)
        if phase == "legacy":
            await write_legacy(factory)
            emit("DONE")
        elif phase == "move":
            await move_single_ledgers(factory, None, LAYOUT)
            emit("DONE")
        else:
            emit(json.dumps(await read_partitions(factory), sort_keys=True))
        await factory.close()


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
