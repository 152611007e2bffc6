"""Per-ledger passwords, as BookKeeper's ledger "master key" (sans-IO).

A ledger created with a password stores, in its metadata, a random salt and the SHA-256 of its
master key, HMAC-SHA256(password, salt): never the password or the key. The writer sends the
key with every add, and recovery with its fencing reads and recovery adds; a bookie that can
read the ledger's metadata refuses those requests (UNAUTHORIZED) when the key's hash differs.
Plain reads need no key (as in BookKeeper). A ledger without a stored hash is not checked, so
ledgers written before passwords existed keep working.

A ledger with MAC digests (client/entry_format.py) signs its entries with a second key from the
same password and salt under another label, as BookKeeper keeps its MAC key apart from the
master key: bookies see the master key, never the MAC key, so they cannot forge entries.

This module must never log a password or a key, or compare them with ``==``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Final

MASTER_KEY_BYTES: Final = 32
SALT_BYTES: Final = 16


def new_salt() -> str:
    return os.urandom(SALT_BYTES).hex()


def derive_master_key(password: bytes, salt_hex: str) -> bytes:
    return hmac.new(password, bytes.fromhex(salt_hex), hashlib.sha256).digest()


def derive_mac_key(password: bytes, salt_hex: str) -> bytes:
    return hmac.new(password, b"ledgerwire entry MAC:" + bytes.fromhex(salt_hex),
                    hashlib.sha256).digest()


def master_key_hash(master_key: bytes) -> str:
    return hashlib.sha256(master_key).hexdigest()


def key_matches(stored_hash: str, master_key: bytes) -> bool:
    """True when `master_key` is the one whose hash the ledger's metadata stores."""
    return hmac.compare_digest(stored_hash.encode(), master_key_hash(master_key).encode())
