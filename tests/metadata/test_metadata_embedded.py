"""The embedded store beyond the shared contract: durability, crash recovery, URL forms."""

from __future__ import annotations

import sqlite3
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

from ledger_backend.metadata import MetadataError, NoNodeError, open_store
from ledger_backend.metadata.embedded import DB_FILE, EmbeddedMetadataStore
from ledger_backend.metadata.sqlite_tree import PendingWrite


async def test_data_survives_close_and_reopen(tmp_path: Path) -> None:
    url = f"embedded:{tmp_path}"
    store = await open_store(url)
    await store.create("/ledgers/L1", b"meta-1", make_parents=True)
    await store.set("/ledgers/L1", b"meta-2", 0)
    first_seq = await store.create("/ledgers/seq-", sequential=True)
    assert await store.next_id("/ids") == 1
    assert await store.next_id("/ids") == 2
    await store.close()

    store = await open_store(str(tmp_path))  # a plain directory path means the same store
    try:
        data, stat = await store.get("/ledgers/L1")
        assert (data, stat.version) == (b"meta-2", 1)
        assert await store.next_id("/ids") == 3
        second_seq = await store.create("/ledgers/seq-", sequential=True)
        assert second_seq > first_seq
        assert await store.children("/ledgers") == [
            "L1", first_seq.rsplit("/", 1)[1], second_seq.rsplit("/", 1)[1]
        ]
    finally:
        await store.close()


async def test_database_is_wal_with_full_sync(tmp_path: Path) -> None:
    store = await open_store(f"embedded:{tmp_path}")
    assert isinstance(store, EmbeddedMetadataStore)
    try:
        conn = store._db.conn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        await store.close()


async def run_python(script: str, directory: Path) -> str:
    """Run script in a fresh interpreter with directory as argv[1]; its stripped stdout."""
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-c", script, str(directory)], capture_stdout=True,
            capture_stderr=True, check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().strip()


CRASHING_OWNER = textwrap.dedent("""
    import os, sys, trio
    from ledger_backend.metadata import open_store

    async def main():
        store = await open_store(sys.argv[1])
        await store.create("/kept", b"persistent")
        await store.create("/kept/owner", b"ephemeral", ephemeral=True)
        print("ready", flush=True)
        os._exit(0)  # die without closing: the session is never ended cleanly

    trio.run(main)
""")


async def test_ephemerals_of_a_dead_process_are_gone_at_open(tmp_path: Path) -> None:
    result = await run_python(CRASHING_OWNER, tmp_path)
    assert result == "ready"
    store = await open_store(str(tmp_path))
    try:
        assert (await store.get("/kept"))[0] == b"persistent"
        assert await store.exists("/kept/owner") is None
        assert await store.children("/kept") == []
    finally:
        await store.close()


SECOND_OPENER = textwrap.dedent("""
    import sys, trio
    from ledger_backend.metadata import MetadataError, open_store

    async def main():
        try:
            store = await open_store(sys.argv[1])
        except MetadataError as exc:
            print("refused:", exc)
        else:
            print("opened")
            await store.close()

    trio.run(main)
""")


async def test_a_second_process_cannot_open_the_same_directory(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path))
    try:
        result = await run_python(SECOND_OPENER, tmp_path)
        assert result.startswith("refused:"), result
    finally:
        await store.close()
    assert await run_python(SECOND_OPENER, tmp_path) == "opened"


async def test_sessions_in_one_process_share_the_directory(tmp_path: Path) -> None:
    first = await open_store(str(tmp_path))
    second = await open_store(f"embedded:{tmp_path}")
    try:
        await first.create("/shared", b"x")
        path = await first.create("/shared/e", ephemeral=True)
        assert (await second.get("/shared"))[0] == b"x"
        assert await second.exists(path) is not None
        await first.close()
        assert await second.exists(path) is None
    finally:
        await first.close()
        await second.close()


async def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / DB_FILE)
    conn.execute("CREATE TABLE other (x)")
    conn.commit()
    conn.close()
    with pytest.raises(MetadataError, match="not a ledgerwire metadata database"):
        await open_store(str(tmp_path))
    # the failed open released the directory lock
    conn = sqlite3.connect(tmp_path / DB_FILE)
    conn.execute("DROP TABLE other")
    conn.commit()
    conn.close()
    store = await open_store(str(tmp_path))
    await store.close()


async def test_memory_urls() -> None:
    fresh_a = await open_store("memory:")
    fresh_b = await open_store("memory:")
    named_a = await open_store("memory:shared-name")
    named_b = await open_store("memory:shared-name")
    try:
        await fresh_a.create("/only-a")
        assert await fresh_b.exists("/only-a") is None
        await named_a.create("/both")
        assert await named_b.exists("/both") is not None
    finally:
        for store in (fresh_a, fresh_b, named_a, named_b):
            await store.close()
    reopened = await open_store("memory:shared-name")  # nobody held it: it starts empty
    try:
        with pytest.raises(NoNodeError):
            await reopened.get("/both")
    finally:
        await reopened.close()


async def test_closing_twice_is_harmless(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path))
    await store.close()
    await store.close()
    with pytest.raises(MetadataError):
        await store.create("/after-close")


async def test_empty_url_is_refused() -> None:
    with pytest.raises(ValueError):
        await open_store("embedded:")


async def test_concurrent_writes_share_commits_and_fail_alone(tmp_path: Path) -> None:
    """Group commit: writes queued while a batch commits go in the next one (fewer fsyncs),
    each all-or-nothing and in call order; one failing write undoes nothing of the others."""
    store = await open_store(f"embedded:{tmp_path}")
    assert isinstance(store, EmbeddedMetadataStore)
    db = store._db
    batches: list[int] = []
    real_batch = db.write_batch

    def counting_batch(batch: Sequence[PendingWrite]) -> None:
        batches.append(len(batch))
        real_batch(batch)

    db.write_batch = counting_batch  # type: ignore[method-assign]
    await store.create("/cas", b"0")
    outcomes: dict[str, object] = {}

    async def create(name: str, key: str = "") -> None:
        try:
            outcomes[key or name] = await store.create(f"/n/{name}", b"x", make_parents=True)
        except MetadataError as exc:
            outcomes[key or name] = exc

    async def bad_cas() -> None:
        try:
            await store.set("/cas", b"1", version=7)  # the wrong version
        except MetadataError as exc:
            outcomes["cas"] = exc

    try:
        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(create, f"c{i}")
                if i == 20:
                    nursery.start_soon(bad_cas)
                    nursery.start_soon(create, "c5", "dup")  # NodeExistsError, alone
        assert sum(batches) == 43 and len(batches) < 43, batches  # some shared a COMMIT
        assert type(outcomes["cas"]).__name__ == "BadVersionError"
        kinds = sorted(type(outcomes[k]).__name__ for k in ("c5", "dup"))
        assert kinds == ["NodeExistsError", "str"]
        assert sorted(await store.children("/n")) == sorted(f"c{i}" for i in range(40))
        assert (await store.get("/cas"))[1].version == 0
    finally:
        await store.close()
    store = await open_store(f"embedded:{tmp_path}")  # and all of it is on disk
    try:
        assert len(await store.children("/n")) == 40
    finally:
        await store.close()


class LoopPasses(trio.abc.Instrument):
    """Counts the passes of the Trio event loop (one I/O wait each)."""

    def __init__(self) -> None:
        self.passes = 0

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1


async def test_a_commits_writers_wake_together(tmp_path: Path) -> None:
    """The writers of a batch, and the one that commits the next, are woken in one pass of the
    event loop: before, each waiter took a lock in turn, one pass per writer (a thousand
    partitions opening at once: a thousand passes, each with an epoll call, per COMMIT)."""
    store = await open_store(f"embedded:{tmp_path}")
    writers = 300
    try:
        await store.create("/w", b"")
        passes = LoopPasses()
        trio.lowlevel.add_instrument(passes)
        try:
            async with trio.open_nursery() as nursery:
                for i in range(writers):
                    nursery.start_soon(store.create, f"/w/n{i}", b"x")
        finally:
            trio.lowlevel.remove_instrument(passes)
        assert len(await store.children("/w")) == writers
        # a few batches, a few passes each (was: more than one pass per writer)
        assert passes.passes < writers // 3, passes.passes
    finally:
        await store.close()


async def test_cancelled_queued_writers_leave_the_others_going(tmp_path: Path) -> None:
    """Writers cancelled while queued are not written, and never stall the queue: the writer
    after them still commits (also when the one woken to commit next was cancelled)."""
    store = await open_store(f"embedded:{tmp_path}")
    try:
        await store.create("/q", b"")
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery, trio.open_nursery() as doomed:
                for i in range(20):
                    nursery.start_soon(store.create, f"/q/n{i}", b"x")
                    doomed.start_soon(store.create, f"/q/d{i}", b"x")
                await trio.testing.wait_all_tasks_blocked()
                doomed.cancel_scope.cancel()
            await store.create("/q/after", b"x")
        children = set(await store.children("/q"))
        assert {f"n{i}" for i in range(20)} | {"after"} <= children
    finally:
        await store.close()
