"""The bookie's check of ledger master keys against ledger metadata (bookie/master_key.py).

Adds (recovery adds included) and fencing reads of a ledger whose metadata stores a password
hash must carry the matching key. The bookie reads a ledger's hash from the metadata store once
and keeps it (a ledger's password never changes), or is told it by a ledger client of its own
process once that client's metadata write of the new ledger committed (`remember`: the hash
the store now holds, without reading it back -- a new partition's first add skipped 3.5% of
its open on that read); a ledger without metadata (deleted, or
written outside a BookKeeper client) or without a hash is not checked. When the store cannot
answer, the request is answered TIMEOUT, which clients retry elsewhere.

This module must never let a request through whose ledger's stored hash it could not compare.
"""

from __future__ import annotations

import json
import logging

from ledger_backend.bookie.master_key import key_matches
from ledger_backend.bookie.protocol import Status
from ledger_backend.client.ledger_metadata import ledger_path
from ledger_backend.metadata.store import MetadataError, MetadataStore, NoNodeError

log = logging.getLogger("ledger_backend.bookie.server")

_MAX_CACHED = 100_000  # ledgers whose hash (or "none") is remembered; older ones are re-read


class LedgerKeys:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._hashes: dict[int, str] = {}  # ledger id -> hex hash, "" for "no password"

    async def refusal(self, ledger_id: int, master_key: bytes) -> Status | None:
        """None when the request may run; else the status to answer it with."""
        stored = self._hashes.get(ledger_id)
        if stored is None:
            try:
                data, _ = await self._store.get(ledger_path(ledger_id))
            except NoNodeError:
                return None  # no metadata: nothing to check against (and nothing cached)
            except MetadataError as exc:
                log.warning("ledger %d: cannot read its metadata to check the key (%s)",
                            ledger_id, exc)  # fmt: skip
                return Status.TIMEOUT
            stored = _stored_hash(data)
            self.remember(ledger_id, stored)
        if not stored or key_matches(stored, master_key):
            return None
        return Status.UNAUTHORIZED

    def remember(self, ledger_id: int, stored_hash: str) -> None:
        """Keep the hash the store holds for ledger_id ("" for none): read here, or told by a
        client of this process whose create of that metadata committed."""
        hashes = self._hashes
        if ledger_id not in hashes and len(hashes) >= _MAX_CACHED:
            hashes.pop(next(iter(hashes)))
        hashes[ledger_id] = stored_hash

    def known_refusal(self, ledger_id: int, master_key: bytes) -> tuple[bool, Status | None]:
        """(True, refusal's answer) when the ledger's hash is already known, without a
        metadata read; (False, None) when `refusal` must read it."""
        stored = self._hashes.get(ledger_id)
        if stored is None:
            return False, None
        if not stored or key_matches(stored, master_key):
            return True, None
        return True, Status.UNAUTHORIZED


def _stored_hash(data: bytes) -> str:
    try:
        doc = json.loads(data)
    except ValueError:
        return ""
    value = doc.get("password_hash", "") if isinstance(doc, dict) else ""
    return value if isinstance(value, str) else ""
