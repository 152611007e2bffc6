"""Ledger metadata records where each offloaded ledger went (driver, location, key, size,
checksum): a ledger offloaded before [offload] was pointed at another directory is still read
from where it is, by the broker's managed ledger and by the Spark bridge; records written
before the location was recorded (format 3) still load and read from the configured store."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import trio

from ledger_backend.client.memory import MemoryBookKeeper
from ledger_backend.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from ledger_backend.managed_ledger.metadata_format import (
    LOCATION_FORMAT_VERSION,
    OFFLOAD_FORMAT_VERSION,
    LedgerRecord,
    ManagedLedgerNode,
    OffloadRecord,
    decode_managed_ledger,
    encode_managed_ledger,
    managed_ledger_path,
)
from ledger_backend.metadata import MetadataStore, open_store
from ledger_backend.offload import FilesystemOffloader
from spark_bridge.offloaded_ledgers import OffloadedLedger, OffloadedLedgers, offload_spec
from spark_bridge.topic_layout import partition_layout

NAME = "public/default/moved-0"
CONFIG = ManagedLedgerConfig(max_entries_per_ledger=10, tail_cache_bytes=0)


def payload(i: int) -> bytes:
    return b"moved-%05d " % i * (i % 5 + 1)


def test_format_3_records_still_load_and_located_ones_are_format_4() -> None:
    old = {"format": 3, "name": "n", "created_ms": 1, "pending": [], "garbage": [],
           "offload_pending": [],
           "ledgers": [{"ledger_id": 7, "entries": 10, "size": 100, "created_ms": 2,
                        "closed": True,
                        "offload": {"driver": "filesystem", "key": "n/7-a.lwo", "size": 150,
                                    "crc32c": 99, "verified_ms": 3, "bookie_deleted": True}},
                       {"ledger_id": 8, "entries": 0, "size": 0, "created_ms": 4,
                        "closed": False}]}
    node = decode_managed_ledger(json.dumps(old).encode(), "/n")
    record = node.ledgers[0].offload
    assert record is not None and record.location == () and record.bookie_deleted
    assert json.loads(encode_managed_ledger(node))["format"] == OFFLOAD_FORMAT_VERSION

    place = (("directory", "/mnt/tier-a"),)
    node.ledgers.append(LedgerRecord(9, 5, 50, 5, True, offload=OffloadRecord(
        "filesystem", "n/9-b.lwo", 80, 7, 6, location=place)))
    raw = encode_managed_ledger(ManagedLedgerNode("n", 1, [node.ledgers[0], node.ledgers[2]]))
    assert json.loads(raw)["format"] == LOCATION_FORMAT_VERSION
    assert json.loads(raw)["ledgers"][1]["offload"]["location"] == {"directory": "/mnt/tier-a"}
    again = decode_managed_ledger(raw, "/n")
    assert [r.offload.location for r in again.ledgers if r.offload] == [(), place]


async def _offload_then_move(store: MetadataStore, old_dir: Path, new_dir: Path
                             ) -> tuple[list[int], list[int]]:  # fmt: skip
    """Ledgers offloaded to old_dir (bookie copies deleted), then [offload] pointed at
    new_dir: the broker's managed ledger reads them all and offloads newer ones there."""
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk, offloader=FilesystemOffloader(old_dir))
        ml = await factory.open(NAME, CONFIG)
        for i in range(25):
            await ml.append(payload(i))
        first = ml.first_position
        assert first is not None
        moved = await ml.offload()
        await ml.delete_offloaded_bookie_copies(0)  # only the objects in tier-a hold them
        await factory.close()

        # [offload] directory now names tier-b: the old ledgers still read, from tier-a
        factory = ManagedLedgerFactory(store, bk, offloader=FilesystemOffloader(new_dir))
        ml = await factory.open(NAME, CONFIG)
        assert [e.data for e in await ml.read(first, 100)] == [payload(i) for i in range(25)]
        for i in range(25, 40):
            await ml.append(payload(i))
        later = await ml.offload()
        await ml.delete_offloaded_bookie_copies(0)
        assert [e.data for e in await ml.read(first, 100)] == [payload(i) for i in range(40)]
        await factory.close()
    return moved, later


def test_ledgers_offloaded_before_the_directory_changed_are_read_from_it(tmp_path: Path
                                                                         ) -> None:  # fmt: skip
    old_dir, new_dir = tmp_path / "tier-a", tmp_path / "tier-b"
    path = managed_ledger_path("/ledgerwire/managed-ledgers", NAME)

    async def broker_side() -> tuple[list[int], list[int], bytes]:
        store = await open_store("memory:")
        try:
            moved, later = await _offload_then_move(store, old_dir, new_dir)
            return moved, later, (await store.get(path))[0]
        finally:
            await store.close()

    moved, later, raw = trio.run(broker_side)
    node = decode_managed_ledger(raw, path)
    where = {r.ledger_id: dict(r.offload.location) for r in node.ledgers if r.offload}
    assert where == {**{i: {"directory": str(old_dir)} for i in moved},
                     **{i: {"directory": str(new_dir)} for i in later}}
    assert len(moved) == 2 and later

    # the Spark bridge, told only of tier-b, reads the tier-a ledgers from tier-a too
    class Access:
        closed_spans: dict[int, object] = {}
        added: list[OffloadedLedger] = []

        def can_read_offloaded(self, driver: str) -> bool:
            return driver == "filesystem"

        def add_offloaded(self, ledger: OffloadedLedger) -> None:
            self.added.append(ledger)

        def get(self, wanted: str) -> bytes | None:
            return raw if wanted == path else None

        def ledger_end(self, ledger_id: int, refresh: bool = False) -> SimpleNamespace:
            return SimpleNamespace(last_entry=-1, closed=False)  # spans are not asked here

    access = Access()
    partition_layout(access, "moved", 0)  # type: ignore[arg-type]
    spec = offload_spec({"ledgerwire.offload.directory": str(new_dir)})
    assert spec is not None
    with OffloadedLedgers(spec) as ledgers:
        for ledger in access.added:
            ledgers.add(ledger)
        got = [e for i in moved for e in ledgers.read(i, 0, 9)]
    assert got == [payload(i) for i in range(20)]


def test_retention_deletes_objects_where_they_were_recorded(tmp_path: Path) -> None:
    old_dir, new_dir = tmp_path / "tier-a", tmp_path / "tier-b"

    async def main() -> None:
        store = await open_store("memory:")
        try:
            await _offload_then_move(store, old_dir, new_dir)
            assert list(old_dir.rglob("*.lwo")) and list(new_dir.rglob("*.lwo"))
            async with MemoryBookKeeper(store) as bk:
                factory = ManagedLedgerFactory(store, bk, offloader=FilesystemOffloader(new_dir))
                ml = await factory.open(NAME, CONFIG)
                ml.config.retention_bytes = 1
                await ml.trim()
                await factory.close()
        finally:
            await store.close()

    trio.run(main)
    assert list(old_dir.rglob("*.lwo")) == [] and list(new_dir.rglob("*.lwo")) == []
