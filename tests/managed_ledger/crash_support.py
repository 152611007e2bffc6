"""What the managed-ledger kill -9 tests share: a driver process on a durable bookie and the
on-disk store (`durable_node`), its output (`emit`), and running it with a crash point set
(`run_driver`), the check that a run stopped where it was meant to (`assert_stopped`), and a
managed ledger's list and its ledgers' states as stored (`stored_list`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from ledger_backend.bookie.server import serve_bookie
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.client.ledger_metadata import LedgerMetadata, ledger_path
from ledger_backend.managed_ledger.metadata_format import (
    decode_managed_ledger,
    managed_ledger_path,
)
from ledger_backend.metadata import MetadataStore, open_store

ROOT_DIR = Path(__file__).resolve().parents[2]


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@asynccontextmanager
async def durable_node(data_dir: Path, port: int) -> AsyncIterator[tuple[MetadataStore,
                                                                         BookKeeper]]:
    """The store in data_dir/meta, one durable bookie on port, a ledger client on both."""
    store = await open_store(str(data_dir / "meta"))
    config = BookieStorageConfig(data_dir=data_dir / "bookie", flush_interval_s=0.05,
                                 disk_check_interval_s=3600.0)
    try:
        async with open_bookie_storage(config) as storage, trio.open_nursery() as nursery:
            await nursery.start(serve_bookie, storage, store, "127.0.0.1", port)
            async with BookKeeper(store, timeout_s=10) as bk:
                yield store, bk
            nursery.cancel_scope.cancel()
    finally:
        await store.close()


def run_driver(module: str, data_dir: Path, port: int, phase: str,
               crash_at: str | None = None, crash_after: int = 1,
               ) -> subprocess.CompletedProcess[str]:
    """`python -m module data_dir port phase`, killed at crash point `crash_at` if given (at
    its `crash_after`-th hit)."""
    env = dict(os.environ)
    env.pop("LEDGERWIRE_CRASH_AT", None)
    env["LEDGERWIRE_CRASH_AFTER"] = str(crash_after)
    if crash_at is not None:
        env["LEDGERWIRE_CRASH_AT"] = crash_at
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT_DIR), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", module, str(data_dir), str(port), phase],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT_DIR, check=False,
    )


def assert_stopped(done: subprocess.CompletedProcess[str], crash_at: str | None) -> None:
    """`done` was killed at crash point `crash_at`, or (None) ran to its end and said DONE."""
    if crash_at is None:
        assert done.returncode == 0 and "DONE" in done.stdout, done.stderr[-3000:]
    else:
        assert done.returncode == -signal.SIGKILL, (
            f"crash point {crash_at} not reached: rc={done.returncode}\n{done.stderr[-3000:]}"
        )


async def stored_list(store: MetadataStore, name: str, root: str = "/ledgerwire/managed-ledgers"
                      ) -> tuple[list[list[int | bool]], dict[int, str]]:
    """Managed ledger `name`'s records ([id, entries, closed]) and each listed ledger's state,
    as the store holds them (read before any owner opens it again)."""
    path = managed_ledger_path(root, name)
    node = decode_managed_ledger((await store.get(path))[0], path)
    states = {r.ledger_id: LedgerMetadata.from_json_bytes(
        (await store.get(ledger_path(r.ledger_id)))[0]).state.value for r in node.ledgers}
    return [[r.ledger_id, r.entries, r.closed] for r in node.ledgers], states
