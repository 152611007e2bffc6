"""The bookies of a standalone node: started on one data directory and one metadata store.

`ledgerwire standalone` runs them in its own process; `standalone --workers N` spreads them
over its workers (worker w serves the bookies i with i % N == w, of max(storage.bookies, N,
the bookie directories the node has): worker_bookie_indexes), so that each worker's adds stay
in its own process, as in the one-process standalone (gateway/process/supervisor.py says why).
Either way bookie i keeps its data in <data_dir>/bookies/<i>/, its identity
"standalone-bookie-<i>" (its cookie refuses a directory of another identity) and its port
storage.bookie_port + i, so a data directory moves between the shapes with its ledgers readable
(every bookie whose directory exists is started again, in any shape).

This module must never start a bookie on a data directory whose cookie names another bookie.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from functools import partial

import trio

from gateway.admin.api import LocalBookie, watch_bookie
from gateway.config.bookie_storage import bookie_engine_config
from gateway.config.listen_errors import naming_listener
from gateway.config.settings import Config
from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.bookie.cookie import check_cookie
from ledger_backend.bookie.server import serve_bookie
from ledger_backend.bookie.storage import open_bookie_storage
from ledger_backend.bookie.storage_api import BookieStorageConfig
from ledger_backend.bookie.tls import BookieTls
from ledger_backend.metadata import MetadataStore


def bookie_storage_config(config: Config, index: int) -> BookieStorageConfig:
    return bookie_engine_config(config.storage, config.data_dir / "bookies" / str(index))


def _bookies_on_disk(config: Config) -> int:
    """1 + the highest index of a bookie data directory the node already has (0: none): a
    node run earlier in a wider shape (`--workers N` makes at least N bookies, each worker's
    ledgers on its own) must start them all again, or their ledgers are unreadable."""
    try:
        names = [p.name for p in (config.data_dir / "bookies").iterdir() if p.is_dir()]
    except OSError:
        return 0
    return max((int(n) + 1 for n in names if n.isdigit()), default=0)


def local_bookie_indexes(config: Config) -> list[int]:
    """The bookies a node with all of them in one process starts (by index)."""
    return list(range(max(config.storage.bookies, _bookies_on_disk(config))))


def node_bookie_count(config: Config, workers: int) -> int:
    """How many bookies a node of `workers` workers has: at least one per worker, and every
    one whose data directory exists."""
    return max(config.storage.bookies, workers, _bookies_on_disk(config))


def worker_bookie_indexes(config: Config, workers: int, worker: int) -> list[int]:
    """The bookies worker `worker` of a `--workers N` node serves (by index)."""
    return list(range(worker, node_bookie_count(config, workers), workers))


async def start_local_bookies(
    config: Config, store: MetadataStore, stack: AsyncExitStack,
    active_ledgers: Callable[[], Awaitable[set[int]]],
    bookie_secret: BookieSecret | None, bookie_tls: BookieTls,
    indexes: Sequence[int] | None = None,
) -> list[LocalBookie]:
    """Start bookie servers (`indexes`, by default `local_bookie_indexes`); they stop when
    `stack` unwinds (servers before their storage).  Returns them for the admin API and
    /metrics."""
    bookie_nursery = await stack.enter_async_context(trio.open_nursery())
    local_bookies: list[LocalBookie] = []
    for index in (local_bookie_indexes(config) if indexes is None else indexes):
        storage_config = bookie_storage_config(config, index)
        # Refuse a data directory that belongs to another bookie identity.
        await check_cookie(storage_config.data_dir, store, f"standalone-bookie-{index}")
        storage = await stack.enter_async_context(
            open_bookie_storage(storage_config, active_ledgers)
        )
        bookie_address = f"{config.storage.bookie_host}:{config.storage.bookie_port + index}"
        with naming_listener(f"bookie {index}", bookie_address, "storage.bookie_port",
                             "--bookie-port"):
            await bookie_nursery.start(
                partial(
                    serve_bookie,
                    storage,
                    store,
                    config.storage.bookie_host,
                    config.storage.bookie_port + index,
                    bookie_id=f"standalone-bookie-{index}",
                    advertised_host=config.storage.bookie_advertised_host or None,
                    secret=bookie_secret,
                    ssl_context=bookie_tls.server_context(),
                )
            )
        local_bookies.append(watch_bookie(f"standalone-bookie-{index}", bookie_address,
                                          storage))
    # Bookie servers stop before their storage closes (exit stack unwinds in reverse).
    stack.callback(bookie_nursery.cancel_scope.cancel)
    return local_bookies
