"""The password hash (or digest type) every ledger of a store carries ("" for none), read
straight from its metadata: how tests see that a process created its ledgers with a ledger
password (and MAC digests)."""

from __future__ import annotations

import json

import trio

from ledger_backend.metadata import open_store


async def _fields(url: str, name: str) -> list[str]:
    store = await open_store(url)
    try:
        ledgers = await store.children("/ledgerwire/ledgers")
        return [json.loads((await store.get(f"/ledgerwire/ledgers/{ledger}"))[0])
                .get(name, "") for ledger in ledgers]  # fmt: skip
    finally:
        await store.close()


def ledger_password_hashes(metadata_url: str) -> list[str]:
    return trio.run(_fields, metadata_url, "password_hash")


def ledger_digest_types(metadata_url: str) -> list[str]:
    return trio.run(_fields, metadata_url, "digest_type")
