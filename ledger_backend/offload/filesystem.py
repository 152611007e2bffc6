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
from pathlib import Path

import trio

from ledger_backend.offload.offloader import ObjectMissingError, ObjectStoreUnavailableError


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

    async def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        await trio.to_thread.run_sync(_write_atomically, path, data)

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

    async def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            await trio.to_thread.run_sync(path.unlink)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ObjectStoreUnavailableError(f"deleting {path}: {exc}") from exc


def _write_atomically(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
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


def _read_range(path: Path, start: int, length: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(length)
    except FileNotFoundError as exc:
        raise ObjectMissingError(f"no object {path}") from exc
    except OSError as exc:
        raise ObjectStoreUnavailableError(f"reading {path}: {exc}") from exc
