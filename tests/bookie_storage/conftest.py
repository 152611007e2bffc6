"""Fixtures for the bookie storage engine tests: a small, fast configuration in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger_backend.bookie.storage_api import BookieStorageConfig


@pytest.fixture
def bookie_config(tmp_path: Path) -> BookieStorageConfig:
    """Background GC and timed checkpoints are effectively off: tests trigger them."""
    return BookieStorageConfig(
        data_dir=tmp_path / "bookie",
        journal_max_group_wait_s=0.001,
        write_cache_bytes=8 << 20,
        read_cache_bytes=4 << 20,
        flush_interval_s=3600.0,
        gc_interval_s=0,
        disk_check_interval_s=3600.0,
    )
