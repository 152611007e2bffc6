"""The bookie identity: a cookie in the data directory that matches one in the metadata store.

A bookie's data directory holds ``COOKIE`` (file header with magic and format version, then a
length- and CRC-32C-checked JSON record: bookie id and instance id); the metadata store holds
the same pair at /ledgerwire/bookies/cookies/<bookie_id>. A bookie starts only when both agree:

- a directory whose cookie names another bookie id belongs to that bookie: refused;
- a metadata cookie with no cookie in the directory means the directory was wiped or replaced
  (its entries are gone, so the bookie must not rejoin under that id as if it still had them):
  refused;
- a directory cookie with no metadata cookie means a different or reset metadata store:
  refused unless ``allow_missing_metadata_cookie`` (then it is restored from the directory);
- instance ids that differ: refused.
- neither exists: a new bookie; the directory cookie is written first, then the metadata one,
  so a crash in between is the (recoverable) "missing metadata cookie" case.

This module must never overwrite an existing cookie (file or node) with a different identity.
"""

from __future__ import annotations

import json
import logging
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

import trio

from ledger_backend.bookie.file_format import (
    FILE_HEADER_SIZE,
    BadFileError,
    atomic_write_file,
    check_file_header,
    crc32c_of,
    pack_file_header,
)
from ledger_backend.metadata.store import MetadataStore, NodeExistsError, NoNodeError
from ledger_backend.secret_files import make_private_dir

logger = logging.getLogger(__name__)

COOKIE_FILE_NAME = "COOKIE"
COOKIES_PATH = "/ledgerwire/bookies/cookies"
COOKIE_MAGIC = b"LWCK"
COOKIE_FORMAT_VERSION = 1
_RECORD_HEADER = struct.Struct(">II")  # payload length, CRC-32C of the payload
_MAX_PAYLOAD_BYTES = 64 * 1024


class CookieError(Exception):
    """The cookie cannot be read, or the bookie identity does not check out."""


class CookieMismatchError(CookieError):
    """The data directory and the metadata store (or the requested id) disagree."""


@dataclass(frozen=True)
class Cookie:
    bookie_id: str
    instance_id: str  # new for every freshly initialised data directory

    def to_json(self) -> bytes:
        return json.dumps(
            {"format_version": COOKIE_FORMAT_VERSION, "bookie_id": self.bookie_id,
             "instance_id": self.instance_id},
            sort_keys=True,
        ).encode()  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Cookie:
        try:
            fields = json.loads(data)
            version = fields["format_version"]
            bookie_id, instance_id = fields["bookie_id"], fields["instance_id"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CookieError(f"cookie in {where} is not a valid cookie record: {exc}") from None
        if version != COOKIE_FORMAT_VERSION:
            raise CookieError(f"cookie in {where} has unsupported format version {version}")
        if not isinstance(bookie_id, str) or not isinstance(instance_id, str):
            raise CookieError(f"cookie in {where} has non-string ids")
        return cls(bookie_id, instance_id)


def validate_bookie_id(bookie_id: str) -> str:
    """A bookie id is one metadata path component: non-empty, no '/', not '.' or '..'."""
    if not bookie_id or "/" in bookie_id or bookie_id in (".", "..") or not bookie_id.isprintable():
        raise ValueError(f"invalid bookie id {bookie_id!r}")
    return bookie_id


def metadata_cookie_path(bookie_id: str) -> str:
    return f"{COOKIES_PATH}/{validate_bookie_id(bookie_id)}"


# --- the file (blocking: call through trio.to_thread) ------------------------------------


def read_cookie_file(data_dir: Path) -> Cookie | None:
    """The directory's cookie, None if there is none; CookieError if it is damaged."""
    path = Path(data_dir) / COOKIE_FILE_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        check_file_header(raw, COOKIE_MAGIC, COOKIE_FORMAT_VERSION)
    except BadFileError as exc:
        raise CookieError(f"{path}: {exc}") from None
    body = raw[FILE_HEADER_SIZE:]
    if len(body) < _RECORD_HEADER.size:
        raise CookieError(f"{path}: truncated cookie record")
    length, crc = _RECORD_HEADER.unpack_from(body)
    payload = body[_RECORD_HEADER.size :]
    if length != len(payload) or length > _MAX_PAYLOAD_BYTES:
        raise CookieError(f"{path}: cookie record length {length} != {len(payload)} bytes")
    if crc32c_of(payload) != crc:
        raise CookieError(f"{path}: cookie record checksum mismatch")
    return Cookie.from_json(payload, str(path))


def write_cookie_file(data_dir: Path, cookie: Cookie) -> None:
    """Atomically write the directory's cookie (temp file, fsync, rename, directory fsync)."""
    data_dir = make_private_dir(data_dir)
    payload = cookie.to_json()
    record = _RECORD_HEADER.pack(len(payload), crc32c_of(payload)) + payload
    header = pack_file_header(COOKIE_MAGIC, COOKIE_FORMAT_VERSION, 0)
    atomic_write_file(data_dir / COOKIE_FILE_NAME, header + record)


# --- the metadata node -------------------------------------------------------------------


async def read_metadata_cookie(store: MetadataStore, bookie_id: str) -> Cookie | None:
    path = metadata_cookie_path(bookie_id)
    try:
        data, _stat = await store.get(path)
    except NoNodeError:
        return None
    return Cookie.from_json(data, f"metadata node {path}")


async def _create_metadata_cookie(store: MetadataStore, cookie: Cookie) -> None:
    path = metadata_cookie_path(cookie.bookie_id)
    try:
        await store.create(path, cookie.to_json(), make_parents=True)
    except NodeExistsError:
        existing = await read_metadata_cookie(store, cookie.bookie_id)
        if existing != cookie:  # another process initialised this bookie id meanwhile
            raise CookieMismatchError(
                f"metadata cookie {path} was created concurrently by another instance "
                f"({existing.instance_id if existing else '?'}); refusing to start"
            ) from None


# --- the check at start-up -----------------------------------------------------------------


async def check_cookie(
    data_dir: Path,
    store: MetadataStore | None,
    bookie_id: str,
    *,
    allow_missing_metadata_cookie: bool = False,
) -> Cookie:
    """Verify (or, for a new bookie, create) the identity; return the cookie in force.

    Raises CookieMismatchError with an explanation when the bookie must not start.
    """
    validate_bookie_id(bookie_id)
    data_dir = Path(data_dir)
    local = await trio.to_thread.run_sync(read_cookie_file, data_dir)
    if local is not None and local.bookie_id != bookie_id:
        raise CookieMismatchError(
            f"data directory {data_dir} belongs to bookie {local.bookie_id!r}, not "
            f"{bookie_id!r}: start it with --bookie-id {local.bookie_id} or use another directory"
        )
    if store is None:
        if local is None:
            local = Cookie(bookie_id, uuid.uuid4().hex)
            await trio.to_thread.run_sync(write_cookie_file, data_dir, local)
        return local
    remote = await read_metadata_cookie(store, bookie_id)
    if remote is not None and remote.bookie_id != bookie_id:
        raise CookieMismatchError(
            f"metadata cookie {metadata_cookie_path(bookie_id)} names bookie {remote.bookie_id!r}"
        )
    if local is None and remote is not None:
        raise CookieMismatchError(
            f"bookie {bookie_id!r} is known to the metadata store (instance "
            f"{remote.instance_id}) but data directory {data_dir} has no cookie: the directory "
            f"is new or was wiped, so this bookie lost its entries. Let auto-recovery "
            f"re-replicate them and start with a new bookie id, or delete "
            f"{metadata_cookie_path(bookie_id)} if the loss is accepted"
        )
    if local is not None and remote is None:
        if not allow_missing_metadata_cookie:
            raise CookieMismatchError(
                f"data directory {data_dir} holds bookie {bookie_id!r} (instance "
                f"{local.instance_id}) but the metadata store has no cookie for it: wrong or "
                f"reset metadata store? If it is the right one, restore the cookie with "
                f"allow_missing_metadata_cookie (--restore-metadata-cookie)"
            )
        logger.warning("bookie %s: restoring its metadata cookie from %s", bookie_id, data_dir)
        await _create_metadata_cookie(store, local)
        return local
    if local is not None and remote is not None:
        if local != remote:
            raise CookieMismatchError(
                f"data directory {data_dir} has instance {local.instance_id} of bookie "
                f"{bookie_id!r} but the metadata store expects instance {remote.instance_id}: "
                f"this directory is not the one that bookie id was registered with"
            )
        return local
    cookie = Cookie(bookie_id, uuid.uuid4().hex)
    logger.info("bookie %s: new identity, instance %s", bookie_id, cookie.instance_id)
    await trio.to_thread.run_sync(write_cookie_file, data_dir, cookie)
    await _create_metadata_cookie(store, cookie)
    return cookie
