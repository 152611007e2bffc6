"""Journal damage and crashes at start-up: a damaged record with later journal files refuses the
start and keeps every file; a torn tail is dropped, also after a second crash before the first
checkpoint."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from ledger_backend.bookie import checkpointing
from ledger_backend.bookie.journal_format import list_journal_files
from ledger_backend.bookie.journal_replay import JournalCorruptError
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig


async def test_damage_before_later_journal_files_refuses_to_start(
    bookie_config: BookieStorageConfig,
) -> None:
    config = dataclasses.replace(bookie_config, journal_max_file_bytes=64 << 10)
    async with open_bookie_storage(config) as storage:
        for entry_id in range(40):  # ~160 KB of adds: several journal files
            await storage.add_entry(9, entry_id, entry_id - 1, bytes([entry_id]) * 4000)
        # crash image: journal fsynced, nothing checkpointed since the start
        crash_image = config.data_dir.with_name("crash-image")
        shutil.copytree(config.data_dir, crash_image)
    journal_dir = crash_image / "journal"
    files = list_journal_files(journal_dir)
    assert len(files) >= 3
    damaged = journal_dir / f"{files[1]:016x}.jnl"
    raw = bytearray(damaged.read_bytes())
    raw[16 + 60] ^= 0xFF  # inside the first record of a middle file
    damaged.write_bytes(bytes(raw))

    with pytest.raises(BaseException) as info:  # raised through the storage's nursery
        async with open_bookie_storage(dataclasses.replace(config, data_dir=crash_image)):
            pass
    assert info.errisinstance(JournalCorruptError) or info.group_contains(
        JournalCorruptError, match="refusing to start", depth=None
    )
    assert list_journal_files(journal_dir) == files  # nothing trimmed


async def torn_tail_image(bookie_config: BookieStorageConfig) -> BookieStorageConfig:
    """A crash image of a bookie that acknowledged entries 0-4 of ledger 3 (b"x" * 100) and
    died writing one more journal record (a torn tail in the newest file), and its config."""
    async with open_bookie_storage(bookie_config) as storage:
        for entry_id in range(5):
            await storage.add_entry(3, entry_id, entry_id - 1, b"x" * 100)
        crash_image = bookie_config.data_dir.with_name("crash-image")
        shutil.copytree(bookie_config.data_dir, crash_image)
    journal_dir = crash_image / "journal"
    newest = journal_dir / f"{list_journal_files(journal_dir)[-1]:016x}.jnl"
    with newest.open("ab") as f:
        f.write(b"\x00\x00\x10\x00partial")  # a torn, never acknowledged record
    return dataclasses.replace(bookie_config, data_dir=crash_image)


async def test_torn_tail_of_the_newest_file_is_dropped(bookie_config: BookieStorageConfig) -> None:
    async with open_bookie_storage(await torn_tail_image(bookie_config)) as s:
        assert [await s.read_entry(3, e) for e in range(5)] == [b"x" * 100] * 5


async def test_a_second_crash_before_the_first_checkpoint_still_starts(
    bookie_config: BookieStorageConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crash 1 leaves a torn tail in the newest journal file.  The restart replays up to it,
    then dies (crash 2) in its first checkpoint, before the mark moved past that file: the
    next start must not take the torn tail for damage followed by a later journal file (a
    file the dying start had opened, holding nothing) and refuse to start."""
    config = await torn_tail_image(bookie_config)  # crash 1

    def crash_before_the_mark(*args: object, **kwargs: object) -> None:
        raise OSError(5, "crash 2: the first checkpoint's mark is never written")

    with monkeypatch.context() as patched:
        patched.setattr(checkpointing, "write_mark", crash_before_the_mark)
        with pytest.raises(BaseException) as info:
            async with open_bookie_storage(config):
                pass
    assert info.errisinstance(OSError) or info.group_contains(OSError, depth=None)
    async with open_bookie_storage(config) as s:
        assert [await s.read_entry(3, e) for e in range(5)] == [b"x" * 100] * 5
        await s.add_entry(3, 5, 4, b"y")
    async with open_bookie_storage(config) as s:
        assert await s.read_entry(3, 5) == b"y"
