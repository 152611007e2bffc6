"""The filesystem offloader: objects are files under one directory (e.g. an NFS mount).

A put writes a temporary file beside the target, fsyncs it, renames it into place and
fsyncs the directory, so a crash leaves either no object or the whole one (a stray
"*.tmp-*" file at worst, never a partial object under the key). An object can also be
staged (`stage`: written in pieces as an offload reads its ledger, the writeback of each
piece started at once with sync_file_range where Linux has it) and stored later with others
(`commit_group`: each file fsynced, renamed, each directory fsynced once), so the disk writes
overlap the reads and the fsyncs before the metadata write only wait for the rest; a group
put (`put_group`) is the same in one worker thread.
A crash between staging and commit leaves a "*.tmp-<32 hex>" file that names no object:
`sweep_staged` removes such files once untouched for a while (the broker's offload service
runs it at start and hourly; the age guard spares another broker's upload in progress in a
shared directory). Directories are created with their parents fsynced, so a new object's
path survives a power cut with it. Keys are relative paths of safe components; a key that
could escape the directory is refused. Blocking file I/O runs in worker threads; this
module must never block the Trio loop.
"""

from __future__ import annotations

import ctypes
import os
import re
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import crc32c
import trio

from ledger_backend.offload.offloader import ObjectMissingError, ObjectStoreUnavailableError

_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16
_READ_BACK_CHUNK = 1 << 20  # read_back's one reused buffer
_SYNC_FILE_RANGE_WRITE = 2  # start writeback of the dirty pages, do not wait for it
_STAGED_NAME = re.compile(r".+\.tmp-[0-9a-f]{32}\Z")  # StagedObject.tmp


def _find_sync_file_range() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """libc's sync_file_range (Linux), or None where there is none."""
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    call.restype = ctypes.c_int
    return call


_sync_file_range = _find_sync_file_range()


class FilesystemOffloader:
    driver = "filesystem"

    def __init__(self, directory: str | Path) -> None:
        self._root = Path(directory).resolve()

    @property
    def location(self) -> str:
        return str(self._root)

    @property
    def location_fields(self) -> dict[str, str]:
        return {"directory": str(self._root)}

    def at(self, fields: dict[str, str]) -> FilesystemOffloader:
        return FilesystemOffloader(fields["directory"])

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") or "\\" in p or "\x00" in p for p in parts):
            raise ValueError(f"bad object key {key!r}")
        return self._root.joinpath(*parts)

    async def put(self, key: str, data: bytes | Sequence[bytes]) -> None:
        await self.put_group([(key, data)])

    async def put_group(self, objects: Sequence[tuple[str, bytes | Sequence[bytes]]]) -> None:
        """Store several objects (key, bytes or parts), each atomically and durably, in one
        worker-thread hop (see the module docstring). On an error no object of the group was
        left half-written; some may be stored whole (the caller deletes them)."""
        staged = [self.stage(key) for key, _ in objects]

        def write_all() -> None:
            try:
                for one, (_, data) in zip(staged, objects, strict=True):
                    one.write(_as_parts(data))
            except BaseException:
                for one in staged:
                    one.discard()
                raise
            _commit(staged)

        await trio.to_thread.run_sync(write_all)

    def stage(self, key: str) -> StagedObject:
        """An object to be written in pieces (StagedObject.write, from a worker thread) and
        stored later by `commit_group`; nothing is under its key before that."""
        return StagedObject(key, self._path(key))

    async def commit_group(self, staged: Sequence[StagedObject]) -> None:
        """Store written staged objects under their keys: fsync each, rename each into
        place, fsync each directory once. On an error the ones not renamed are discarded;
        some may be stored whole (the caller deletes them)."""
        await trio.to_thread.run_sync(_commit, list(staged))

    async def sweep_staged(self, older_than_s: float) -> int:
        """Remove staged files ("*.tmp-<hex>", left by a crash before their commit) not
        modified for `older_than_s` seconds; how many were removed. Never an object."""
        return await trio.to_thread.run_sync(_sweep_staged, self._root, older_than_s)

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


def _as_parts(data: bytes | Sequence[bytes]) -> list[bytes]:
    return [bytes(data)] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)


class StagedObject:
    """An object being written to a temporary file beside its place (created at the first
    write), stored under its key only by a commit. Its methods block: call them from worker
    threads."""

    def __init__(self, key: str, path: Path) -> None:
        self.key = key
        self.path = path
        self.tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
        self._fd: int | None = None
        self._done = False  # committed or discarded

    def write(self, parts: Sequence[bytes]) -> None:
        """Append the parts (writeback started as they go)."""
        try:
            if self._fd is None:
                if self._done:
                    raise OSError("write to a committed or discarded object")
                _make_dirs(self.path.parent)
                self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            _write_parts(self._fd, parts)
        except OSError as exc:
            raise ObjectStoreUnavailableError(f"writing {self.path}: {exc}") from exc

    def discard(self) -> None:
        """Close and remove the temporary file (never the object); no error if it is gone."""
        if self._done:
            return
        self._done = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            self.tmp.unlink()
        except OSError:
            pass  # never created, or gone: a stray temporary file names no object anyway


def _commit(staged: list[StagedObject]) -> None:
    """fsync every staged file, then rename each into place, then fsync each directory once:
    nothing is renamed before every file is on the disk. On an error the ones not renamed
    are discarded."""
    where = Path()  # what the error names
    try:
        for one in staged:
            where = one.path
            if one._fd is None:
                one.write([])  # an empty object is a file too
            assert one._fd is not None
            os.fsync(one._fd)
        for one in staged:
            where = one.path
            assert one._fd is not None
            os.close(one._fd)
            one._fd = None
            os.replace(one.tmp, one.path)
            one._done = True
        for where in dict.fromkeys(one.path.parent for one in staged):
            _fsync_dir(where)
    except (OSError, ObjectStoreUnavailableError) as exc:
        for one in staged:
            one.discard()
        if isinstance(exc, ObjectStoreUnavailableError):
            raise
        raise ObjectStoreUnavailableError(f"writing {where}: {exc}") from exc


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _make_dirs(directory: Path) -> None:
    """mkdir -p, fsyncing the parent of each directory made (its entry is then durable)."""
    if directory.is_dir():
        return
    missing: list[Path] = []
    at = directory
    while not at.exists():
        missing.append(at)
        at = at.parent
    directory.mkdir(parents=True, exist_ok=True)
    for made in reversed(missing):
        _fsync_dir(made.parent)


def _sweep_staged(root: Path, older_than_s: float) -> int:
    cutoff = time.time() - older_than_s
    removed = 0
    for folder, _, files in os.walk(root):
        for name in files:
            if not _STAGED_NAME.match(name):
                continue
            path = os.path.join(folder, name)
            try:
                if os.stat(path).st_mtime <= cutoff:
                    os.unlink(path)
                    removed += 1
            except FileNotFoundError:
                pass  # committed or discarded meanwhile
    return removed


def _write_parts(fd: int, parts: Sequence[bytes]) -> None:
    """Write the parts in order with writev (the kernel gathers them: no joined copy),
    starting the writeback of each stretch as soon as it is written (the fsync that follows
    then waits only for the rest)."""
    for start in range(0, len(parts), _IOV_MAX):
        chunk = parts[start : start + _IOV_MAX]
        wanted = sum(len(p) for p in chunk)
        written = os.writev(fd, chunk)
        if written != wanted:
            rest = memoryview(b"".join(chunk))[written:]  # a short write: finish plainly
            while rest:
                rest = rest[os.write(fd, rest) :]
        if _sync_file_range is not None:
            _sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)  # a hint: its result is moot


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
