"""The bookie identity cookie: created once, checked on every start, mismatches refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger_backend.bookie.cookie import (
    COOKIE_FILE_NAME,
    Cookie,
    CookieError,
    CookieMismatchError,
    check_cookie,
    metadata_cookie_path,
    read_cookie_file,
    read_metadata_cookie,
    write_cookie_file,
)
from ledger_backend.metadata import open_store


async def test_new_bookie_gets_matching_file_and_metadata_cookies(tmp_path: Path) -> None:
    async with await open_store("memory:") as store:
        cookie = await check_cookie(tmp_path, store, "bookie-1")
        assert read_cookie_file(tmp_path) == cookie
        assert await read_metadata_cookie(store, "bookie-1") == cookie
        # a restart finds both and agrees
        assert await check_cookie(tmp_path, store, "bookie-1") == cookie


async def test_directory_of_another_bookie_is_refused(tmp_path: Path) -> None:
    async with await open_store("memory:") as store:
        await check_cookie(tmp_path, store, "bookie-1")
        with pytest.raises(CookieMismatchError, match="belongs to bookie 'bookie-1'"):
            await check_cookie(tmp_path, store, "bookie-2")
        with pytest.raises(CookieMismatchError, match="belongs to bookie"):
            await check_cookie(tmp_path, None, "bookie-2")


async def test_wiped_directory_is_refused(tmp_path: Path) -> None:
    async with await open_store("memory:") as store:
        await check_cookie(tmp_path / "a", store, "bookie-1")
        with pytest.raises(CookieMismatchError, match="has no cookie"):
            await check_cookie(tmp_path / "fresh", store, "bookie-1")


async def test_metadata_cookie_of_another_instance_is_refused(tmp_path: Path) -> None:
    async with await open_store("memory:") as store:
        await check_cookie(tmp_path / "a", store, "bookie-1")
        write_cookie_file(tmp_path / "b", Cookie("bookie-1", "someone-else"))
        with pytest.raises(CookieMismatchError, match="not the one"):
            await check_cookie(tmp_path / "b", store, "bookie-1")


async def test_missing_metadata_cookie_is_refused_unless_restoring(tmp_path: Path) -> None:
    async with await open_store("memory:") as store:
        first = await check_cookie(tmp_path, store, "bookie-1")
    async with await open_store("memory:") as empty_store:
        with pytest.raises(CookieMismatchError, match="no cookie for it"):
            await check_cookie(tmp_path, empty_store, "bookie-1")
        restored = await check_cookie(
            tmp_path, empty_store, "bookie-1", allow_missing_metadata_cookie=True
        )
        assert restored == first
        assert await read_metadata_cookie(empty_store, "bookie-1") == first


async def test_damaged_cookie_file_is_an_error(tmp_path: Path) -> None:
    write_cookie_file(tmp_path, Cookie("bookie-1", "abc"))
    path = tmp_path / COOKIE_FILE_NAME
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CookieError, match="checksum"):
        read_cookie_file(tmp_path)
    path.write_bytes(b"XXXX" + bytes(raw[4:]))
    with pytest.raises(CookieError, match="magic"):
        read_cookie_file(tmp_path)
    path.write_bytes(bytes(raw[:18]))
    with pytest.raises(CookieError, match="truncated"):
        read_cookie_file(tmp_path)


def test_bookie_ids_must_be_one_path_component() -> None:
    assert metadata_cookie_path("127.0.0.1:3181") == "/ledgerwire/bookies/cookies/127.0.0.1:3181"
    for bad in ["", "a/b", "..", "x\n"]:
        with pytest.raises(ValueError):
            metadata_cookie_path(bad)
