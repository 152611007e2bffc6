"""Compiling the bulk decoder (spark_bridge/bulk_decode.py): where it cannot be built or cached
the bridge falls back to the per-record decoders with one WARNING line, and several processes
compiling at once (Spark workers, xdist workers) each end with a whole library. No Spark."""

from __future__ import annotations

import logging
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from spark_bridge import bulk_decode


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


def test_a_missing_compiler_falls_back_with_one_warning(
        fresh_cache: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    monkeypatch.setenv("CC", str(fresh_cache / "no-such-cc"))
    with caplog.at_level(logging.WARNING, "spark_bridge.bulk_decode"):
        assert bulk_decode._load() is None
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is None
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", str(fresh_cache))  # no cc, no gcc on it
    caplog.clear()
    with caplog.at_level(logging.WARNING, "spark_bridge.bulk_decode"):
        assert bulk_decode._load() is None
    assert len(caplog.records) == 1


def test_a_cache_that_cannot_be_written_falls_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    blocked = tmp_path / "home-is-a-file"  # as a read-only home: mkdir fails (root included)
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    with caplog.at_level(logging.WARNING, "spark_bridge.bulk_decode"):
        assert bulk_decode._load() is None
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is None


def test_a_compiler_given_with_arguments_is_used(
        fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("CC", "cc -Wall")
    assert bulk_decode._load() is not None
    assert len(list((fresh_cache / "ledgerwire").glob("bulk_records-*.so"))) == 1


def _compile_in_a_process(cache: str) -> str:
    os.environ["XDG_CACHE_HOME"] = cache
    return str(bulk_decode._load() is not None)


def test_concurrent_compiles_each_load_a_whole_library(fresh_cache: Path) -> None:
    with ProcessPoolExecutor(4) as pool:
        loaded = list(pool.map(_compile_in_a_process, [str(fresh_cache)] * 4))
    assert loaded == ["True"] * 4
    folder = fresh_cache / "ledgerwire"
    assert [p.name.startswith("bulk_records-") for p in folder.iterdir()] == [True]  # nothing left
