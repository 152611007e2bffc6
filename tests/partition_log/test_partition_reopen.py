"""Reopening a partition log: a small log is read once (partition_recovery.read_small_log), and
it opens with the same offsets and producer state as on the general path, whether its writer
closed it or died (no close: the new owner fences and recovers the ledger)."""

from __future__ import annotations

import pytest

from gateway.topics import partition_recovery
from ledger_backend.managed_ledger.log_reader import LogReader
from protocols.kafka import record_batch as rb
from protocols.kafka.errors import OutOfOrderSequenceError


def batch(n: int = 1, *, pid: int = -1, seq: int = -1) -> bytes:
    return rb.build_batch([(None, b"v%d" % i) for i in range(n)], producer_id=pid,
                          producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every managed-ledger read (read_entry goes through read) appends 1 to the list."""
    calls: list[int] = []
    real = LogReader.read

    async def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(LogReader, "read", counted)
    return calls


async def test_a_small_log_reopens_with_one_read(make_broker, monkeypatch) -> None:
    broker = await make_broker(max_entries_per_ledger=2)
    await broker.topics.create_topic("few", 1)
    plog = await broker.topics.partition("few", 0)
    for _ in range(5):  # three ledgers
        await plog.append(batch(2))
    await broker.topics.close()
    reads = count_reads(monkeypatch)
    plog2 = await (await make_broker(max_entries_per_ledger=2)).topics.partition("few", 0)
    assert (plog2.log_start_offset, plog2.high_watermark) == (0, 10)
    assert len(reads) == 1  # the general path: last entry, first entry, the replay's reads
    monkeypatch.setattr(partition_recovery, "SMALL_LOG_ENTRIES", 4)  # five: too many
    await plog2.close()
    reads.clear()
    plog3 = await (await make_broker(max_entries_per_ledger=2)).topics.partition("few", 0)
    assert (plog3.log_start_offset, plog3.high_watermark) == (0, 10)
    assert len(reads) > 1


@pytest.mark.parametrize("small_limit", [0, 64], ids=["general", "small"])
@pytest.mark.parametrize("clean_close", [True, False], ids=["closed", "killed"])
async def test_reopen_offsets_and_producers_agree(make_broker, monkeypatch, small_limit,
                                                  clean_close) -> None:
    monkeypatch.setattr(partition_recovery, "SMALL_LOG_ENTRIES", small_limit)
    broker = await make_broker(max_entries_per_ledger=3, snapshot_interval_batches=4)
    await broker.topics.create_topic("mix", 1)
    plog = await broker.topics.partition("mix", 0)
    for i in range(6):  # snapshot after the 4th batch, two replayed after it
        await plog.append(batch(2, pid=9, seq=2 * i))
        await plog.append(batch(1))
    assert plog.high_watermark == 18
    assert await plog.delete_records_before(7) == 7  # the first ledger (offsets 0-5) goes
    if clean_close:
        await broker.topics.close()
    plog2 = await (await make_broker(max_entries_per_ledger=3)).topics.partition("mix", 0)
    assert (plog2.log_start_offset, plog2.high_watermark) == (7, 18)
    assert (await plog2.append(batch(2, pid=9, seq=10))).base_offset == 15  # a retry
    with pytest.raises(OutOfOrderSequenceError):
        await plog2.append(batch(1, pid=9, seq=3))
    assert (await plog2.append(batch(1, pid=9, seq=12))).base_offset == 18
    assert plog2.high_watermark == 19
