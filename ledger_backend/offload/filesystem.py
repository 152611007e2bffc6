"""The filesystem offloader: objects are files under one directory (e.g. an NFS mount).

A put writes a temporary file beside the target, fsyncs it, renames it into place and
fsyncs the directory, so a crash leaves either no object or the whole one (a stray
"*.tmp-*" file at worst, never a partial object under the key). Keys are relative paths of
safe components; a key that could escape the directory is refused. Blocking file I/O runs
in worker threads; this module must never block the Trio loop.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import crc32c
import trio

from ledger_backend.offload.offloader import ObjectMissingError, ObjectStoreUnavailableError

_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16
_READ_BACK_CHUNK = 1 << 20  # read_back's one reused buffer


class FilesystemOffloader:
    driver = "filesystem"

    def __init__(self, directory: str | Path) -> None:
        self._root = Path(directory).resolve()

    @property
    def location(self) -> str:
        return str(self._root)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") or "\\" in p or "\x00" in p for p in parts):
            raise ValueError(f"bad object key {key!r}")
        return self._root.joinpath(*parts)

    async def put(self, key: str, data: bytes | Sequence[bytes]) -> None:
        path = self._path(key)
        parts = [bytes(data)] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
        await trio.to_thread.run_sync(_write_atomically, path, parts)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        path = self._path(key)
        return await trio.to_thread.run_sync(_read_range, path, start, length)

    async def size(self, key: str) -> int:
        path = self._path(key)
        try:
            return (await trio.to_thread.run_sync(path.stat)).st_size
        except FileNotFoundError as exc:
            raise ObjectMissingError(f"no object {path}") from exc
        except OSError as exc:
            raise ObjectStoreUnavailableError(f"{path}: {exc}") from exc

    async def read_back(self, key: str) -> tuple[int, int]:
        """(size, CRC-32C) of every byte of the stored object, read back from the file in
        one worker-thread hop through one reused buffer (an upload's verification)."""
        path = self._path(key)
        return await trio.to_thread.run_sync(_read_back, path)

    async def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            await trio.to_thread.run_sync(path.unlink)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ObjectStoreUnavailableError(f"deleting {path}: {exc}") from exc


def _write_atomically(path: Path, parts: list[bytes]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_parts(fd, parts)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise ObjectStoreUnavailableError(f"writing {path}: {exc}") from exc


def _write_parts(fd: int, parts: list[bytes]) -> None:
    """Write the parts in order with writev (the kernel gathers them: no joined copy)."""
    for start in range(0, len(parts), _IOV_MAX):
        chunk = parts[start : start + _IOV_MAX]
        wanted = sum(len(p) for p in chunk)
        written = os.writev(fd, chunk)
        if written == wanted:
            continue
        rest = memoryview(b"".join(chunk))[written:]  # a short write: finish plainly
        while rest:
            rest = rest[os.write(fd, rest) :]


def _read_back(path: Path) -> tuple[int, int]:
    buffer = bytearray(_READ_BACK_CHUNK)
    crc = size = 0
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError as exc:
        raise ObjectMissingError(f"no object {path}") from exc
    except OSError as exc:
        raise ObjectStoreUnavailableError(f"reading {path}: {exc}") from exc
    try:
        with memoryview(buffer) as view:
            while count := os.readv(fd, [buffer]):
                crc = crc32c.crc32c(view[:count], crc)
                size += count
    except OSError as exc:
        raise ObjectStoreUnavailableError(f"reading {path}: {exc}") from exc
    finally:
        os.close(fd)
    return size, crc & 0xFFFFFFFF


def _read_range(path: Path, start: int, length: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(length)
    except FileNotFoundError as exc:
        raise ObjectMissingError(f"no object {path}") from exc
    except OSError as exc:
        raise ObjectStoreUnavailableError(f"reading {path}: {exc}") from exc
