"""How managed ledgers and cursors are laid out in the metadata store, and their JSON formats.

Layout (one node per managed ledger, one per cursor):

    <root>/<encoded name>                      managed ledger node: its list of ledgers
    <root>/<encoded name>/cursors/<encoded c>  one node per durable cursor

A name is any string ("public/default/orders-0"); it is encoded into ONE safe path component:
UTF-8 bytes, every byte outside [A-Za-z0-9_-] written as %XX (so "/", "." and "%" never appear
raw and "." / ".." can never result). The encoding is reversible and injective.

Both node kinds are JSON objects carrying "format": a version. A reader refuses a version it
does not know (MetadataFormatError) rather than guess. This module is pure: it must never do I/O.

Version 2 (written only once a ledger rewrite -- compaction -- has touched the node; untouched
nodes stay version 1, byte for byte) adds to the managed ledger node:

- per ledger, "replaced": [lowest, highest] -- the ids of the ledgers a rewritten ledger took
  the place of (transitively). Its ORDER KEY is `lowest`; a plain ledger's key is its id.
  The list is in strictly increasing key order (ids are unique, but a rewritten ledger's
  id is newer than those of the ledgers after it);
- "pending": ids of rewrite outputs being written, not listed yet (deleted if the rewrite dies);
- "garbage": ids a swap unlisted and that still have to be deleted.

A version-1 reader refuses a version-2 node instead of misordering it.

Version 3 (written only once a ledger of the node has been offloaded to tiered storage,
ledger_backend/offload) adds, per offloaded ledger, "offload": {"driver", "key", "size",
"crc32c", "verified_ms", "bookie_deleted"} -- where the ledger's verified object lives. Once
"bookie_deleted" is true the bookies no longer hold the ledger: a reader that ignored
"offload" would find nothing, so older readers must refuse version 3 (they do). The node
also carries "offload_pending": keys of objects being uploaded, not recorded yet (deleted by
the next owner if the offload dies).

Version 4 (written once a ledger's offload record carries its location) adds to "offload" a
"location": the driver's own description of where the object store is -- {"directory": ...}
for the filesystem driver, {"bucket", "prefix", "region", "endpoint"} for S3, never a
credential -- so a ledger offloaded before [offload] was pointed elsewhere is still read from
where it is. A version-3 record has no location (readers use the configured store) and still
loads; a version-3 reader refuses version 4 rather than read from the wrong store. Version 4
also carries "offload_pending_at" (pending key -> location) for keys whose object goes
elsewhere than the configured store (a namespace's own), so the sweep deletes it there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ledger_backend.managed_ledger.types import MetadataFormatError, Position

FORMAT_VERSION = 1
REWRITE_FORMAT_VERSION = 2
OFFLOAD_FORMAT_VERSION = 3
LOCATION_FORMAT_VERSION = 4
_KNOWN_VERSIONS = (FORMAT_VERSION, REWRITE_FORMAT_VERSION, OFFLOAD_FORMAT_VERSION,
                   LOCATION_FORMAT_VERSION)
CURSORS_CHILD = "cursors"

_SAFE_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
# encode_name of an ASCII name, one str.translate (the per-byte loop was 4% of a first open)
_ASCII_ESCAPES = {b: (chr(b) if b in _SAFE_BYTES else f"%{b:02X}") for b in range(128)}


def encode_name(name: str) -> str:
    """One path component for `name` (non-empty); reversible with decode_name."""
    if not name:
        raise ValueError("a managed ledger or cursor name must not be empty")
    if name.isascii():
        return name.translate(_ASCII_ESCAPES)
    out: list[str] = []
    for byte in name.encode("utf-8"):
        out.append(chr(byte) if byte in _SAFE_BYTES else f"%{byte:02X}")
    return "".join(out)


def decode_name(component: str) -> str:
    """The name that encode_name turned into `component`; ValueError if it is not one."""
    raw = bytearray()
    i = 0
    while i < len(component):
        ch = component[i]
        if ch == "%":
            hex_digits = component[i + 1 : i + 3]
            if len(hex_digits) != 2:
                raise ValueError(f"bad escape in encoded name {component!r}")
            raw.append(int(hex_digits, 16))
            i += 3
        else:
            if ord(ch) not in _SAFE_BYTES:
                raise ValueError(f"character {ch!r} cannot appear in encoded name {component!r}")
            raw.append(ord(ch))
            i += 1
    return raw.decode("utf-8")


def managed_ledger_path(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{encode_name(name)}"


def cursors_path(root: str, name: str) -> str:
    return f"{managed_ledger_path(root, name)}/{CURSORS_CHILD}"


def cursor_path(root: str, name: str, cursor_name: str) -> str:
    return f"{cursors_path(root, name)}/{encode_name(cursor_name)}"


@dataclass(frozen=True)
class OffloadRecord:
    """Where an offloaded ledger's verified object lives (see version 3 above)."""

    driver: str
    key: str
    size: int
    crc32c: int
    verified_ms: int
    bookie_deleted: bool = False
    # where the driver's store is, as sorted (field, value) pairs; () = recorded before
    # version 4 (the configured store of `driver`)
    location: tuple[tuple[str, str], ...] = ()


@dataclass
class LedgerRecord:
    """One ledger in a managed ledger's list (mutable, owned by the managed ledger).

    closed=True means entries/size are final (the ledger was closed or recovered); a record
    with closed=False may hold more entries than it says and must be recovered before use
    by a new owner.
    """

    ledger_id: int
    entries: int
    size: int
    created_ms: int
    closed: bool
    replaced: tuple[int, int] | None = None  # (lowest, highest) id a rewrite replaced
    offload: OffloadRecord | None = None  # set once a verified copy is in tiered storage

    @property
    def order_key(self) -> int:
        """Where the ledger sits in log order (its id, or the first id it replaced)."""
        return self.ledger_id if self.replaced is None else self.replaced[0]


@dataclass
class ManagedLedgerNode:
    name: str
    created_ms: int
    ledgers: list[LedgerRecord]
    pending: list[int] = field(default_factory=list)
    garbage: list[int] = field(default_factory=list)
    offload_pending: list[str] = field(default_factory=list)
    # pending key -> where its object is being put (the driver's location fields), for a key
    # whose place is not simply the configured store's: the sweep must delete it there
    offload_pending_at: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def offloaded(self) -> bool:
        return bool(self.offload_pending) or any(r.offload is not None for r in self.ledgers)

    @property
    def located(self) -> bool:
        return bool(self.offload_pending_at) or any(
            r.offload is not None and r.offload.location for r in self.ledgers)

    @property
    def rewritten(self) -> bool:
        return bool(self.pending or self.garbage) or any(
            r.replaced is not None for r in self.ledgers
        )


@dataclass
class CursorNode:
    name: str
    mark_delete: Position | None
    properties: dict[str, int]


def _load_json(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetadataFormatError(f"{what}: not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise MetadataFormatError(f"{what}: expected a JSON object")
    version = obj.get("format")
    if version not in _KNOWN_VERSIONS:
        raise MetadataFormatError(
            f"{what}: format version {version!r} is not supported (this code reads "
            f"{', '.join(map(str, _KNOWN_VERSIONS))})"
        )
    return obj


def _encode_record(r: LedgerRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ledger_id": r.ledger_id,
        "entries": r.entries,
        "size": r.size,
        "created_ms": r.created_ms,
        "closed": r.closed,
    }
    if r.replaced is not None:
        out["replaced"] = list(r.replaced)
    if r.offload is not None:
        o = r.offload
        out["offload"] = {
            "driver": o.driver,
            "key": o.key,
            "size": o.size,
            "crc32c": o.crc32c,
            "verified_ms": o.verified_ms,
            "bookie_deleted": o.bookie_deleted,
        }
        if o.location:
            out["offload"]["location"] = dict(o.location)
    return out


def encode_managed_ledger(node: ManagedLedgerNode) -> bytes:
    if node.located:
        version = LOCATION_FORMAT_VERSION
    elif node.offloaded:
        version = OFFLOAD_FORMAT_VERSION
    else:
        version = REWRITE_FORMAT_VERSION if node.rewritten else FORMAT_VERSION
    obj: dict[str, Any] = {
        "format": version,
        "name": node.name,
        "created_ms": node.created_ms,
        "ledgers": [_encode_record(r) for r in node.ledgers],
    }
    if version > FORMAT_VERSION:
        obj["pending"] = list(node.pending)
        obj["garbage"] = list(node.garbage)
    if version >= OFFLOAD_FORMAT_VERSION:
        obj["offload_pending"] = list(node.offload_pending)
    if node.offload_pending_at:
        obj["offload_pending_at"] = {k: dict(v) for k, v in node.offload_pending_at.items()}
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _decode_replaced(item: dict[str, Any]) -> tuple[int, int] | None:
    raw = item.get("replaced")
    if raw is None:
        return None
    low, high = int(raw[0]), int(raw[1])
    if low > high:
        raise ValueError(f"replaced range {raw} is reversed")
    return low, high


def _decode_offload(item: dict[str, Any]) -> OffloadRecord | None:
    raw = item.get("offload")
    if raw is None:
        return None
    return OffloadRecord(
        driver=str(raw["driver"]),
        key=str(raw["key"]),
        size=int(raw["size"]),
        crc32c=int(raw["crc32c"]),
        verified_ms=int(raw["verified_ms"]),
        bookie_deleted=bool(raw["bookie_deleted"]),
        location=tuple(sorted((str(k), str(v)) for k, v in raw.get("location", {}).items())),
    )


def decode_managed_ledger(data: bytes, path: str) -> ManagedLedgerNode:
    obj = _load_json(data, f"managed ledger node {path}")
    try:
        records = [
            LedgerRecord(
                ledger_id=int(item["ledger_id"]),
                entries=int(item["entries"]),
                size=int(item["size"]),
                created_ms=int(item["created_ms"]),
                closed=bool(item["closed"]),
                replaced=_decode_replaced(item),
                offload=_decode_offload(item),
            )
            for item in obj["ledgers"]
        ]
        node = ManagedLedgerNode(
            name=str(obj["name"]),
            created_ms=int(obj["created_ms"]),
            ledgers=records,
            pending=[int(i) for i in obj.get("pending", [])],
            garbage=[int(i) for i in obj.get("garbage", [])],
            offload_pending=[str(k) for k in obj.get("offload_pending", [])],
            offload_pending_at={str(k): {str(f): str(v) for f, v in place.items()}
                                for k, place in obj.get("offload_pending_at", {}).items()},
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MetadataFormatError(f"managed ledger node {path}: bad field: {exc!r}") from exc
    keys = [r.order_key for r in records]
    if keys != sorted(set(keys)):
        raise MetadataFormatError(
            f"managed ledger node {path}: ledgers not in increasing order: {keys}"
        )
    ids = [r.ledger_id for r in records]
    if len(set(ids)) != len(ids):
        raise MetadataFormatError(f"managed ledger node {path}: a ledger is listed twice: {ids}")
    return node


def encode_cursor(node: CursorNode) -> bytes:
    return json.dumps(
        {
            "format": FORMAT_VERSION,
            "name": node.name,
            "mark_delete": None if node.mark_delete is None else list(node.mark_delete),
            "properties": dict(node.properties),
        },
        separators=(",", ":"),
    ).encode("utf-8")


def decode_cursor(data: bytes, path: str) -> CursorNode:
    obj = _load_json(data, f"cursor node {path}")
    try:
        raw_position = obj["mark_delete"]
        position = (
            None if raw_position is None else Position(int(raw_position[0]), int(raw_position[1]))
        )
        properties = {str(k): int(v) for k, v in obj["properties"].items()}
        return CursorNode(name=str(obj["name"]), mark_delete=position, properties=properties)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise MetadataFormatError(f"cursor node {path}: bad field: {exc!r}") from exc
