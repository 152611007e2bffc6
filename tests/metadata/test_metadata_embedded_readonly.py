"""open_store("embedded-ro:DIR"): a read-only view beside a live embedded store session.

The writer holds the directory (its lock, its ephemeral nodes) the whole time, as a running
standalone does; the view must read what it wrote, see later writes, refuse every write, and
leave the writer's ephemeral nodes alone when it opens and closes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger_backend.metadata import NoNodeError, open_store
from ledger_backend.metadata.embedded_readonly import ReadOnlyEmbeddedStore, ReadOnlyStoreError
from ledger_backend.metadata.store import CreateOp


async def test_readonly_view_reads_a_live_store_and_refuses_writes(tmp_path: Path) -> None:
    directory = tmp_path / "metadata"
    writer = await open_store(f"embedded:{directory}")
    try:
        await writer.create("/topics/t1", b"one", make_parents=True)
        await writer.create("/bookies/b1", b"alive", ephemeral=True, make_parents=True)
        for url in (f"embedded-ro:{directory}", f"embedded-ro://{directory}"):
            view = await open_store(url)
            try:
                assert isinstance(view, ReadOnlyEmbeddedStore)
                assert await view.get("/topics/t1") == await writer.get("/topics/t1")
                assert (await view.get("/topics/t1"))[0] == b"one"
                assert not (await view.get("/topics/t1"))[1].ephemeral
                assert (await view.get("/bookies/b1"))[1].ephemeral
                assert await view.children("/") == ["bookies", "topics"]
                assert await view.exists("/nope") is None
                with pytest.raises(NoNodeError):
                    await view.children("/nope")

                await writer.set("/topics/t1", b"two", -1)  # the broker keeps writing
                assert await view.get("/topics/t1") == await writer.get("/topics/t1")
                assert (await view.get("/topics/t1"))[0] == b"two"

                with pytest.raises(ReadOnlyStoreError):
                    await view.create("/topics/t2", b"")
                with pytest.raises(ReadOnlyStoreError):
                    await view.set("/topics/t1", b"x", -1)
                with pytest.raises(ReadOnlyStoreError):
                    await view.delete("/topics/t1")
                with pytest.raises(ReadOnlyStoreError):
                    await view.multi([CreateOp("/topics/t3")])
                with pytest.raises(ReadOnlyStoreError):
                    await view.next_id("/counter")
                with pytest.raises(ReadOnlyStoreError):
                    view.watch("/topics")
            finally:
                await view.close()
            await writer.set("/topics/t1", b"one", -1)
        # the view never behaved as a new session: the writer's ephemeral node is still there
        assert await writer.exists("/bookies/b1") is not None
        assert await writer.children("/topics") == ["t1"]
    finally:
        await writer.close()


async def test_readonly_view_never_creates_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "not-there"
    with pytest.raises(NoNodeError):
        await open_store(f"embedded-ro:{missing}")
    assert not missing.exists()
    with pytest.raises(ValueError, match="no directory"):
        await open_store("embedded-ro:")
