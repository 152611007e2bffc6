"""The transaction APIs over the wire against the in-process stack: the whole flow, fencing,
and Kafka's error codes for invalid transitions."""

from __future__ import annotations

from typing import Any

import trio

from protocols.kafka.errors import ErrorCode
from protocols.kafka.record_batch import build_batch, decode_records, iter_batches
from protocols.kafka.transaction_coordinator import TxnState
from tests.kafka_server.conftest import KafkaStack
from tests.kafka_server.kafka_wire_client import WireClient
from tests.kafka_server.test_kafka_handlers_wire import (
    create_topic,
    fetch_body,
    fetched_records,
    produce,
)

INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28
FETCH, OFFSET_FETCH = 1, 9


async def init(client: WireClient, txn_id: str, timeout_ms: int = 60000,
               version: int = 3) -> tuple[int, int]:
    answer = await client.request(INIT_PRODUCER_ID, version, {
        "transactional_id": txn_id, "transaction_timeout_ms": timeout_ms,
        "producer_id": -1, "producer_epoch": -1})
    assert answer["error_code"] == 0, answer
    return answer["producer_id"], answer["producer_epoch"]


async def add_partitions(client: WireClient, txn_id: str, pid: int, epoch: int,
                         partitions: list[tuple[str, int]], version: int = 3) -> dict[Any, int]:
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    topic_list = [{"name": t, "partitions": ps} for t, ps in topics.items()]
    if version <= 3:
        answer = await client.request(ADD_PARTITIONS, version, {
            "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": topic_list})
        results = answer["results_by_topic_v3_and_below"]
    else:
        answer = await client.request(ADD_PARTITIONS, version, {"transactions": [{
            "transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
            "verify_only": False, "topics": topic_list}]})
        assert answer["error_code"] == 0
        results = answer["results_by_transaction"][0]["topic_results"]
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in results for p in t["results_by_partition"]}


async def end_txn(client: WireClient, txn_id: str, pid: int, epoch: int, commit: bool,
                  version: int = 3) -> int:
    answer = await client.request(END_TXN, version, {
        "transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
        "committed": commit})
    return int(answer["error_code"])


def txn_batch(pid: int, epoch: int, seq: int, prefix: str, n: int = 3) -> bytes:
    return build_batch([(None, f"{prefix}{i}".encode()) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def data_values(partition_answer: dict) -> list[bytes | None]:
    """Values of the data records (control batches left out, as clients do)."""
    return [r.value for _h, batch in iter_batches(partition_answer["records"] or b"")
            if not _h.is_control for r in decode_records(batch)]


async def fetch_part(client: WireClient, topic: str, offset: int, isolation: int,
                     max_wait_ms: int = 0) -> dict:
    answer = await client.request(FETCH, 11, fetch_body(
        topic, offset, isolation_level=isolation, max_wait_ms=max_wait_ms, min_bytes=1))
    return answer["responses"][0]["partitions"][0]


async def test_commit_and_abort_with_read_committed_fetches(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "wire-txn")
        pid, epoch = await init(client, "app-1")
        assert await add_partitions(client, "app-1", pid, epoch, [("wire-txn", 0)],
                                    version=4) == {("wire-txn", 0): 0}
        assert (await produce(client, "wire-txn", 0, txn_batch(pid, epoch, 0, "c")))[
            "error_code"] == 0
        part = await fetch_part(client, "wire-txn", 0, 1)
        assert (part["high_watermark"], part["last_stable_offset"]) == (3, 0)
        assert part["records"] in (b"", None)
        assert len(fetched_records(await fetch_part(client, "wire-txn", 0, 0))) == 3
        assert await end_txn(client, "app-1", pid, epoch, True) == 0
        assert await end_txn(client, "app-1", pid, epoch, True) == 0  # a retried EndTxn
        # An aborted transaction next: listed in aborted_transactions for read_committed.
        assert await add_partitions(client, "app-1", pid, epoch, [("wire-txn", 0)]) == {
            ("wire-txn", 0): 0}
        await produce(client, "wire-txn", 0, txn_batch(pid, epoch, 3, "a"))
        assert await end_txn(client, "app-1", pid, epoch, False) == 0
        part = await fetch_part(client, "wire-txn", 0, 1)
        assert part["last_stable_offset"] == part["high_watermark"] == 8
        assert part["aborted_transactions"] == [{"producer_id": pid, "first_offset": 4}]
        # The client drops the aborted records itself; the batches go out as stored.
        assert data_values(part) == [b"c0", b"c1", b"c2", b"a0", b"a1", b"a2"]
        uncommitted = await fetch_part(client, "wire-txn", 0, 0)
        assert uncommitted["aborted_transactions"] is None
        txn = stack.broker.transaction_coordinator.describe("app-1")
        assert txn.state is TxnState.COMPLETE_ABORT


async def test_a_read_committed_fetch_wakes_when_the_transaction_commits(
    stack: KafkaStack,
) -> None:
    async with await stack.client() as client, await stack.client() as reader:
        await create_topic(client, "wake")
        pid, epoch = await init(client, "waker")
        await add_partitions(client, "waker", pid, epoch, [("wake", 0)])
        await produce(client, "wake", 0, txn_batch(pid, epoch, 0, "w"))
        got: list[dict] = []

        async def long_poll() -> None:
            got.append(await fetch_part(reader, "wake", 0, 1, max_wait_ms=5000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_poll)
            await trio.sleep(0.3)
            assert not got
            started = trio.current_time()
            assert await end_txn(client, "waker", pid, epoch, True) == 0
        assert trio.current_time() - started < 1.0
        assert data_values(got[0]) == [b"w0", b"w1", b"w2"]


async def test_invalid_transitions_answer_kafka_error_codes(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "bad")
        pid, epoch = await init(client, "bad-1")
        # EndTxn with no transaction open.
        assert await end_txn(client, "bad-1", pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
        # Unknown transactional id / producer id mapping.
        assert await end_txn(client, "nope", pid, epoch, True) == (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        codes = await add_partitions(client, "bad-1", pid + 1000, epoch, [("bad", 0)])
        assert codes == {("bad", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
        # Unknown partition.
        codes = await add_partitions(client, "bad-1", pid, epoch, [("bad", 0), ("bad", 7)])
        assert codes == {("bad", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         ("bad", 0): ErrorCode.OPERATION_NOT_ATTEMPTED}
        # A second InitProducerId bumps the epoch: the first one is now stale.
        pid2, epoch2 = await init(client, "bad-1")
        assert (pid2, epoch2) == (pid, epoch + 1)
        assert await add_partitions(client, "bad-1", pid, epoch, [("bad", 0)], version=3) == {
            ("bad", 0): ErrorCode.PRODUCER_FENCED}
        assert await add_partitions(client, "bad-1", pid, epoch, [("bad", 0)], version=1) == {
            ("bad", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        assert await end_txn(client, "bad-1", pid, epoch, False, version=1) == (
            ErrorCode.INVALID_PRODUCER_EPOCH)
        # Commit after an abort, abort after a commit.
        await add_partitions(client, "bad-1", pid2, epoch2, [("bad", 0)])
        assert await end_txn(client, "bad-1", pid2, epoch2, False) == 0
        assert await end_txn(client, "bad-1", pid2, epoch2, True) == ErrorCode.INVALID_TXN_STATE
        # TxnOffsetCommit without AddOffsetsToTxn.
        await add_partitions(client, "bad-1", pid2, epoch2, [("bad", 0)])
        answer = await client.request(TXN_OFFSET_COMMIT, 2, {
            "transactional_id": "bad-1", "group_id": "g", "producer_id": pid2,
            "producer_epoch": epoch2, "topics": [{"name": "bad", "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.INVALID_TXN_STATE
        # Bad transaction timeout.
        answer = await client.request(INIT_PRODUCER_ID, 3, {
            "transactional_id": "bad-2", "transaction_timeout_ms": 0,
            "producer_id": -1, "producer_epoch": -1})
        assert answer["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT


async def test_reinit_aborts_the_zombie_transaction_and_fences_it(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "zombie", 2)
        pid, epoch = await init(client, "z")
        await add_partitions(client, "z", pid, epoch, [("zombie", 0), ("zombie", 1)])
        await produce(client, "zombie", 0, txn_batch(pid, epoch, 0, "z"))
        pid2, epoch2 = await init(client, "z")  # the restarted instance
        assert pid2 == pid and epoch2 > epoch
        part = await fetch_part(client, "zombie", 0, 1)
        assert part["last_stable_offset"] == part["high_watermark"] == 4  # 3 + abort marker
        assert part["aborted_transactions"] == [{"producer_id": pid, "first_offset": 0}]
        late = await produce(client, "zombie", 0, txn_batch(pid, epoch, 3, "late"))
        assert late["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert await end_txn(client, "z", pid, epoch, True) == ErrorCode.PRODUCER_FENCED


async def test_txn_offset_commit_is_visible_only_after_commit(stack: KafkaStack) -> None:
    async with await stack.client() as client:
        await create_topic(client, "src")
        await create_topic(client, "dst")
        groups = stack.broker.group_coordinator
        for commit, offset in ((False, 7), (True, 9)):
            pid, epoch = await init(client, "eos")
            await add_partitions(client, "eos", pid, epoch, [("dst", 0)])
            answer = await client.request(ADD_OFFSETS, 3, {
                "transactional_id": "eos", "producer_id": pid, "producer_epoch": epoch,
                "group_id": "eos-group"})
            assert answer["error_code"] == 0
            answer = await client.request(TXN_OFFSET_COMMIT, 3, {
                "transactional_id": "eos", "group_id": "eos-group", "producer_id": pid,
                "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                "group_instance_id": None, "topics": [{"name": "src", "partitions": [
                    {"partition_index": 0, "committed_offset": offset,
                     "committed_leader_epoch": -1, "committed_metadata": "m"}]}]})
            assert answer["topics"][0]["partitions"][0]["error_code"] == 0
            assert groups.fetch_offsets("eos-group", None) == {}  # pending, not committed
            assert await end_txn(client, "eos", pid, epoch, commit) == 0
        committed = groups.fetch_offsets("eos-group", None)
        assert {k: v.offset for k, v in committed.items()} == {("src", 0): 9}
