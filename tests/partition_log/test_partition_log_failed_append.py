"""A batch acknowledged after an earlier one failed must not let a retry of the lost one pass
as a duplicate (the high watermark and producer snapshots never move past a hole)."""

from __future__ import annotations

import pytest
import trio

from gateway.topics.partition_log import PartitionLog, PartitionLogConfig
from ledger_backend.client.errors import BKTimeoutError
from ledger_backend.client.memory import MemoryBookKeeper, MemoryWriteHandle
from ledger_backend.managed_ledger.factory import ManagedLedgerFactory
from ledger_backend.managed_ledger.types import ManagedLedgerConfig
from ledger_backend.metadata import open_store
from protocols.kafka.errors import KafkaProtocolError
from protocols.kafka.record_batch import build_batch

PID = 7


def batch(seq: int, value: bytes) -> bytes:
    return build_batch([(None, value)], producer_id=PID, producer_epoch=0, base_sequence=seq)


async def test_lost_batch_retry_is_not_taken_for_a_duplicate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = trio.Event()
    real_append = MemoryWriteHandle.append

    async def flaky_append(self: MemoryWriteHandle, data: bytes) -> int:
        if b"AAAA" in data:  # batch A times out after B was sent on the next ledger
            await gate.wait()
            raise BKTimeoutError("injected: bookie did not answer in time")
        return await real_append(self, data)

    monkeypatch.setattr(MemoryWriteHandle, "append", flaky_append)
    store = await open_store("memory:")
    async with MemoryBookKeeper(store) as bk:
        factory = ManagedLedgerFactory(store, bk)
        mlc = ManagedLedgerConfig(max_entries_per_ledger=2)
        pc = PartitionLogConfig(snapshot_interval_batches=3)
        plog = await PartitionLog.open("t-0", await factory.open("t-0", mlc), store, "/s/t-0", pc)
        assert (await plog.append(batch(0, b"p0"))).base_offset == 0
        outcomes: dict[str, object] = {}

        async def send(name: str, data: bytes) -> None:
            try:
                outcomes[name] = (await plog.append(data)).base_offset
            except KafkaProtocolError as exc:
                outcomes[name] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "A", batch(1, b"AAAA"))
            await trio.sleep(0.01)
            nursery.start_soon(send, "B", batch(2, b"BBBB"))
            await trio.sleep(0.05)
            gate.set()
        assert isinstance(outcomes["A"], KafkaProtocolError)
        assert isinstance(outcomes["B"], KafkaProtocolError), "B must not be acked over a hole"
        await plog.close()

        reopened = await PartitionLog.open(
            "t-0", await factory.open("t-0", mlc), store, "/s/t-0", pc
        )
        try:
            result = await reopened.append(batch(1, b"AAAA"))
        except KafkaProtocolError:
            result = None  # refused (out of order) is fine: the client learns of it
        stored = b"".join(await reopened.read(0, 1 << 20))
        if result is not None:  # acknowledged: then it must really be in the log
            assert b"AAAA" in stored
        await reopened.close()
