"""The password hash every ledger of a store carries ("" for none), read straight from its
metadata: how tests see that a process created its ledgers with a ledger password."""

from __future__ import annotations

import json

import trio

from ledger_backend.metadata import open_store


async def _hashes(url: str) -> list[str]:
    store = await open_store(url)
    try:
        names = await store.children("/ledgerwire/ledgers")
        return [json.loads((await store.get(f"/ledgerwire/ledgers/{name}"))[0])
                .get("password_hash", "") for name in names]  # fmt: skip
    finally:
        await store.close()


def ledger_password_hashes(metadata_url: str) -> list[str]:
    return trio.run(_hashes, metadata_url)
