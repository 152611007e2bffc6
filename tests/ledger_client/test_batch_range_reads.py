"""Range reads through batch requests (client/batch_reads.py) against in-process bookies over
TCP: across ensemble changes, with a bookie down, with a bad digest in the middle of a batch,
from a bookie that answers BAD_REQUEST and from one that drops the connection (older bookies)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest
import trio

from ledger_backend.bookie import server as server_module
from ledger_backend.bookie.frame_decoder import FrameDecoder
from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.protocol import Message, ProtocolError, ReadEntriesRequest
from ledger_backend.bookie.server import serve_bookie
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.errors import DigestMismatchError
from ledger_backend.client.write_handle import WriteHandle
from ledger_backend.metadata import MetadataStore
from tests.ledger_client.bookie_cluster import InProcessCluster, memory_store, running_bookies


@pytest.fixture
async def store() -> AsyncIterator[MetadataStore]:
    async with memory_store() as s:
        yield s


def _payload(i: int) -> bytes:
    return b"entry-%05d-" % i + bytes([i % 256]) * (i % 97)


async def _append(wh: WriteHandle, first: int, count: int) -> None:
    for i in range(first, first + count):
        assert await wh.append(_payload(i)) == i


def _batch_answers(bk: BookKeeper, bookies: list[str]) -> int:
    return sum(bk.context.pool.connection(b).batch_answers for b in bookies)


def _tamper(cluster: InProcessCluster, bookie: str, ledger_id: int, entry_id: int) -> None:
    storage = cluster.storage(bookie)
    assert isinstance(storage, MemoryBookieStorage)
    entries = storage._ledgers[ledger_id].entries  # test-only: damage one stored copy
    body = entries[entry_id]
    entries[entry_id] = body[:-1] + bytes([body[-1] ^ 0xFF])


async def test_range_reads_across_ensemble_changes_with_a_bookie_down(
    store: MetadataStore,
) -> None:
    with trio.fail_after(60):
        async with running_bookies(store, 4) as cluster, BookKeeper(store, timeout_s=5) as bk:
            wh = await bk.create_ledger(2, 2, 2)
            await _append(wh, 0, 300)
            await cluster.stop_bookie(wh.metadata.current_ensemble[0])
            await _append(wh, 300, 300)
            await cluster.stop_bookie(wh.metadata.current_ensemble[0])  # the replacement
            await _append(wh, 600, 300)
            await wh.close()
            metadata = wh.metadata
            assert len(metadata.ensembles) == 3
            rh = await bk.open_ledger(wh.ledger_id, recovery=False)
            # both first fragments have one bookie down: their entries come from the other
            assert await rh.read(0, 899) == [_payload(i) for i in range(900)]
            assert await rh.read(250, 650) == [_payload(i) for i in range(250, 651)]
            assert await rh.read(299, 300) == [_payload(299), _payload(300)]
            live = list(cluster.bookies)
            assert _batch_answers(bk, live) >= 3  # one per fragment at least: batches served


async def test_a_bad_digest_in_the_middle_of_a_batch_is_read_from_another_bookie(
    store: MetadataStore,
) -> None:
    with trio.fail_after(60):
        async with running_bookies(store, 2) as cluster, BookKeeper(store, timeout_s=5) as bk:
            wh = await bk.create_ledger(2, 2, 2)
            await _append(wh, 0, 50)
            await wh.close()
            first_asked = wh.metadata.current_ensemble[0]  # a range's first chunk goes here
            _tamper(cluster, first_asked, wh.ledger_id, 20)
            rh = await bk.open_ledger(wh.ledger_id, recovery=False)
            assert await rh.read(0, 49) == [_payload(i) for i in range(50)]
            assert bk.context.pool.connection(first_asked).batch_answers >= 1


async def test_a_bad_digest_on_the_only_copy_fails_the_read(store: MetadataStore) -> None:
    with trio.fail_after(60):
        async with running_bookies(store, 1) as cluster, BookKeeper(store, timeout_s=5) as bk:
            wh = await bk.create_ledger(1, 1, 1)
            await _append(wh, 0, 40)
            await wh.close()
            _tamper(cluster, wh.metadata.current_ensemble[0], wh.ledger_id, 17)
            rh = await bk.open_ledger(wh.ledger_id, recovery=False)
            with pytest.raises(DigestMismatchError, match="entry 17"):
                await rh.read(0, 39)
            assert await rh.read(0, 16) == [_payload(i) for i in range(17)]
            assert await rh.read(18, 39) == [_payload(i) for i in range(18, 40)]


async def test_a_bookie_without_batch_reads_is_read_entry_by_entry(store: MetadataStore) -> None:
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery, BookKeeper(store, timeout_s=5) as bk:
            serve = functools.partial(serve_bookie, batch_reads=False, drain_timeout_s=0.1)
            address = str(await nursery.start(serve, MemoryBookieStorage(), store,
                                              "127.0.0.1", 0))  # fmt: skip
            wh = await bk.create_ledger(1, 1, 1)
            await _append(wh, 0, 30)
            await wh.close()
            rh = await bk.open_ledger(wh.ledger_id, recovery=False)
            assert await rh.read(0, 29) == [_payload(i) for i in range(30)]
            connection = bk.context.pool.connection(address)
            assert not connection.batch_reads and connection.batch_answers == 0
            assert await rh.read(5, 25) == [_payload(i) for i in range(5, 26)]
            nursery.cancel_scope.cancel()


class _OldBookieDecoder(FrameDecoder):
    """What a bookie older than READ_ENTRIES does with one: an unknown op code, a bad frame,
    the connection closed."""

    def feed(self, data: bytes | bytearray | memoryview) -> list[Message]:
        messages = super().feed(data)
        if any(isinstance(m, ReadEntriesRequest) for m in messages):
            raise ProtocolError("unknown op code 0x07")
        return messages


async def test_a_bookie_that_drops_batch_reads_is_read_entry_by_entry(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "FrameDecoder", _OldBookieDecoder)
    with trio.fail_after(60):
        async with running_bookies(store, 1) as cluster, BookKeeper(store, timeout_s=5) as bk:
            wh = await bk.create_ledger(1, 1, 1)
            await _append(wh, 0, 30)
            await wh.close()
            rh = await bk.open_ledger(wh.ledger_id, recovery=False)
            connection = bk.context.pool.connection(next(iter(cluster.bookies)))
            for _ in range(3):  # each time the connection drops, the entries come one by one
                assert await rh.read(0, 29) == [_payload(i) for i in range(30)]
            assert not connection.batch_reads and connection.batch_losses == 3
            assert await rh.read(3, 28) == [_payload(i) for i in range(3, 29)]
            assert connection.batch_losses == 3  # not asked again
