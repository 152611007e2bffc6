"""A bookie killed in the middle of a journal rollover starts again with every record of the
files before it: whatever the old file's cut-back left (its zero-filled tail or none) and
whatever became of the next file (not there, empty, part of its header, its header alone, a
torn first record).  Power loss can leave any of these; kill -9 only some."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import hypothesis.strategies as st
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from test_bookie_journal import scan_all

from ledger_backend.bookie.file_format import FILE_HEADER_SIZE
from ledger_backend.bookie.journal_format import (
    TYPE_ADD,
    encode_record,
    journal_file_name,
    list_journal_files,
)
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig


def payload(entry_id: int) -> bytes:
    return bytes([entry_id % 251]) * 4000


@pytest.fixture
def running_image(bookie_config: BookieStorageConfig, tmp_path: Path) -> Path:
    """A bookie's data directory copied while it ran: several journal files, nothing
    checkpointed since its start."""
    config = dataclasses.replace(bookie_config, journal_max_file_bytes=64 << 10,
                                 journal_preallocate_bytes=16 << 10)
    image = tmp_path / "running-image"

    async def run() -> None:
        async with open_bookie_storage(config) as storage:
            for entry_id in range(60):
                await storage.add_entry(9, entry_id, entry_id - 1, payload(entry_id))
            shutil.copytree(config.data_dir, image)

    trio.run(run)
    return image


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    zero_tail=st.sampled_from([0, 1, 36, 4096, 16 << 10]),
    next_file=st.sampled_from(["missing", "empty", "part of its header", "its header",
                               "a torn record"]),
    header_bytes=st.integers(1, FILE_HEADER_SIZE - 1),
)
def test_a_crash_mid_rollover_keeps_every_record_before_it(
    running_image: Path, bookie_config: BookieStorageConfig,
    tmp_path_factory: pytest.TempPathFactory, zero_tail: int, next_file: str, header_bytes: int,
) -> None:
    data_dir = tmp_path_factory.mktemp("crashed") / "bookie"
    shutil.copytree(running_image, data_dir)
    journal_dir = data_dir / "journal"
    files = list_journal_files(journal_dir)
    assert len(files) >= 3
    newest = journal_dir / journal_file_name(files[-1])
    header = newest.read_bytes()[:FILE_HEADER_SIZE]
    newest.unlink()  # the rollover into it is what crashed: none of its records was written
    before, _stop = scan_all(journal_dir)
    assert before and {r.entry_id for r in before} <= set(range(60))
    old = journal_dir / journal_file_name(files[-2])
    with old.open("ab") as f:  # the cut-back of the old file's zero tail did not last
        f.write(bytes(zero_tail))
    record = encode_record(TYPE_ADD, 9, 99, 98, payload(99)) + payload(99)
    contents = {"empty": b"", "part of its header": header[:header_bytes], "its header": header,
                "a torn record": header + record[: len(record) // 2]}
    if next_file != "missing":
        newest.write_bytes(contents[next_file])

    async def start_and_read() -> None:
        config = dataclasses.replace(bookie_config, data_dir=data_dir)
        for _life in range(2):  # and once more, after the first start's checkpoint
            async with open_bookie_storage(config) as storage:
                for r in before:
                    assert await storage.read_entry(9, r.entry_id) == payload(r.entry_id)
                await storage.add_entry(9, 1000 + _life, -1, b"after")  # it takes adds again

    trio.run(start_and_read)
