"""Ledger metadata: the record that says where a ledger's entries live and whether it is closed.

Stored as JSON (with a format version) at /ledgerwire/ledgers/<zero-padded id> and only ever
changed by compare-and-set on the store's version. This module is pure data plus the (de)serialiser
and the path rules; it must never talk to bookies, and it must never write metadata without a
version check (the CAS helpers live in bookkeeper.py's callers via `write_metadata`).
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger_backend.client.errors import InvalidQuorumError, LedgerMetadataError
from ledger_backend.metadata.store import CreateOp

METADATA_FORMAT_VERSION = 1
LEDGERS_PATH = "/ledgerwire/ledgers"
LEDGER_ID_COUNTER_PATH = "/ledgerwire/ledger-id"
AVAILABLE_BOOKIES_PATH = "/ledgerwire/bookies/available"
DIGEST_TYPE_CRC32C = "CRC32C"
DIGEST_TYPE_HMAC_SHA256 = "HMAC_SHA256"  # entries carry a MAC (entry_format.py version 2)
_LEDGER_ID_DIGITS = 20


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


def ledger_path(ledger_id: int) -> str:
    """Metadata path of a ledger: zero-padded so children sort numerically."""
    if ledger_id < 0:
        raise ValueError(f"ledger id must be >= 0, got {ledger_id}")
    return f"{LEDGERS_PATH}/{ledger_id:0{_LEDGER_ID_DIGITS}d}"


def ledger_id_from_node_name(name: str) -> int | None:
    """Inverse of `ledger_path` for one child name; None for names that are not ledgers."""
    if len(name) != _LEDGER_ID_DIGITS or not name.isdigit():
        return None
    return int(name)


def validate_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    if not ensemble_size >= write_quorum >= ack_quorum >= 1:
        raise InvalidQuorumError(
            f"need E >= Qw >= Qa >= 1, got E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}"
        )


@dataclass(frozen=True)
class LedgerMetadata:
    """One ledger's metadata. `ensembles` is [(first_entry_id, [bookie "host:port", ...]), ...],
    sorted by first entry id; the last one is the fragment currently written."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: str = DIGEST_TYPE_CRC32C
    ctime_ms: int = 0
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict)
    # a ledger with a password (bookie/master_key.py): hex salt and hex SHA-256 of its master
    # key; empty for ledgers without one (and for every ledger written before they existed)
    password_salt: str = ""
    password_hash: str = ""

    def __post_init__(self) -> None:
        validate_quorums(self.ensemble_size, self.write_quorum, self.ack_quorum)
        if not self.ensembles:
            raise LedgerMetadataError("a ledger needs at least one ensemble")
        previous = -1
        for first_entry, bookies in self.ensembles:
            if first_entry < previous or first_entry < 0:
                raise LedgerMetadataError(f"ensembles out of order at entry {first_entry}")
            if len(bookies) != self.ensemble_size or len(set(bookies)) != len(bookies):
                raise LedgerMetadataError(f"bad ensemble {list(bookies)} at entry {first_entry}")
            previous = first_entry

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def current_ensemble(self) -> tuple[str, ...]:
        return self.ensembles[-1][1]

    def ensemble_for_entry(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble of the fragment that holds `entry_id` (last fragment starting <= it)."""
        chosen = self.ensembles[0][1]
        for first_entry, bookies in self.ensembles:
            if first_entry <= entry_id:
                chosen = bookies
            else:
                break
        return chosen

    def write_set(self, entry_id: int) -> list[int]:
        """Ensemble indexes holding `entry_id`: (e + i) mod E for i < Qw."""
        return [(entry_id + i) % self.ensemble_size for i in range(self.write_quorum)]

    def write_set_bookies(self, entry_id: int) -> list[str]:
        ensemble = self.ensemble_for_entry(entry_id)
        return [ensemble[i] for i in self.write_set(entry_id)]

    def replace(self, **changes: Any) -> LedgerMetadata:
        return dataclasses.replace(self, **changes)

    def with_new_ensemble(self, first_entry_id: int, bookies: Sequence[str]) -> LedgerMetadata:
        """Start a fragment at `first_entry_id`; a fragment starting there already is replaced
        (nothing was acknowledged in it)."""
        kept = tuple(e for e in self.ensembles if e[0] < first_entry_id)
        return self.replace(ensembles=kept + ((first_entry_id, tuple(bookies)),))

    def to_json_bytes(self) -> bytes:
        doc = {
            "format_version": METADATA_FORMAT_VERSION,
            "ensemble_size": self.ensemble_size,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "state": self.state.value,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "ensembles": [[first, list(bookies)] for first, bookies in self.ensembles],
            "digest_type": self.digest_type,
            "ctime_ms": self.ctime_ms,
            "custom_metadata": {
                key: base64.b64encode(value).decode("ascii")
                for key, value in sorted(self.custom_metadata.items())
            },
        }
        if self.password_hash:
            doc["password_salt"] = self.password_salt
            doc["password_hash"] = self.password_hash
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode("utf-8")

    @classmethod
    def from_json_bytes(cls, data: bytes) -> LedgerMetadata:
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise LedgerMetadataError(f"ledger metadata is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise LedgerMetadataError("ledger metadata is not a JSON object")
        version = doc.get("format_version")
        if version != METADATA_FORMAT_VERSION:
            raise LedgerMetadataError(f"unsupported ledger metadata format version {version!r}")
        try:
            return cls(
                ensemble_size=int(doc["ensemble_size"]),
                write_quorum=int(doc["write_quorum"]),
                ack_quorum=int(doc["ack_quorum"]),
                state=LedgerState(doc["state"]),
                last_entry_id=int(doc["last_entry_id"]),
                length=int(doc["length"]),
                ensembles=tuple(
                    (int(first), tuple(str(b) for b in bookies))
                    for first, bookies in doc["ensembles"]
                ),
                digest_type=str(doc["digest_type"]),
                ctime_ms=int(doc["ctime_ms"]),
                custom_metadata={
                    str(k): base64.b64decode(v, validate=True)
                    for k, v in doc.get("custom_metadata", {}).items()
                },
                password_salt=str(doc.get("password_salt", "")),
                password_hash=str(doc.get("password_hash", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, LedgerMetadataError):
                raise
            raise LedgerMetadataError(f"malformed ledger metadata: {exc!r}") from exc


@dataclass(frozen=True)
class PreparedLedger:
    """A ledger whose metadata is not written yet: the caller commits `ops` in its own
    multi() (with whatever lists the ledger), then calls `adopt_ledger`. Until then no bookie
    has heard of it; if the multi fails, the id is simply never used."""

    ledger_id: int
    metadata: LedgerMetadata
    ops: tuple[CreateOp, ...]
