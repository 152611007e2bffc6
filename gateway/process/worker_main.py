"""A child process of `standalone --workers N`: the bookies, or one broker worker.

Started by gateway/process/supervisor.py as `python -m gateway.process.worker_main`; what to
run comes pickled on stdin from the supervisor (its parent, over a pipe only it holds), never
from a file or the command line, so nothing another user can reach is ever unpickled:

    {"role": "bookies" | "broker", "name": "worker 0", "config": Config,
     "metadata_url": "shared:...", "layout": ClusterLayout (broker only),
     "bookies": [bookie indexes the broker serves in-process],
     "node_brokers": [every worker's node id] (broker only), "parent": its pid}

The first thing a child does is ask the kernel to SIGKILL it when its parent dies
(PR_SET_PDEATHSIG through prctl), then check that the parent is still the supervisor (it may
have died before the prctl): a kill -9 of the supervisor leaves no orphan behind.

A broker worker is a cluster broker (gateway/process/cluster_broker.py) on the supervisor's
shared metadata store serving its share of the node's bookies in-process (local_bookies.py);
the "bookies" role (all of them in one process of their own) is the storage.worker_bookies =
false shape.
Both stop cleanly on SIGTERM.  This module must never run anything without a living parent.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import signal
import sys
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import trio

from gateway.config.listen_errors import config_error_of
from gateway.config.settings import Config
from gateway.process.cluster_broker import run_broker
from gateway.process.gc_policy import settle_heap
from gateway.process.local_bookies import start_local_bookies
from gateway.process.logging_setup import setup_logging
from gateway.process.standalone import ledger_password
from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.bookie.tls import BookieTls
from ledger_backend.client.bookkeeper import BookKeeper
from ledger_backend.metadata import open_store

log = logging.getLogger("ledgerwire.worker")

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux); exit now if it is dead already."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    except (OSError, AttributeError) as exc:  # not Linux: the supervisor's group kill remains
        print(f"ledgerwire worker: cannot tie this process to its parent: {exc}",
              file=sys.stderr)
    if os.getppid() != parent:
        os._exit(1)  # the supervisor died before the prctl took effect


async def run_bookies(config: Config, metadata_url: str) -> None:
    """The node's bookies on the shared store, until SIGTERM/SIGINT."""
    secret = BookieSecret.load(config.storage.bookie_secret or None,
                               config.storage.bookie_secret_file or None)
    tls = BookieTls(config.storage.bookie_tls_certfile, config.storage.bookie_tls_keyfile,
                    config.storage.bookie_tls_cafile)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with AsyncExitStack() as stack:
            store = await open_store(metadata_url)
            stack.push_async_callback(store.close)
            bookkeeper = await stack.enter_async_context(
                BookKeeper(store, bookie_secret=secret, bookie_tls=tls,
                           ledger_password=ledger_password(config),
                           entry_mac=config.storage.entry_mac))

            async def active_ledgers() -> set[int]:
                return set(await bookkeeper.list_ledgers())

            await start_local_bookies(config, store, stack, active_ledgers, secret, tls)
            settle_heap()  # start-up's heap frozen, the collector's thresholds (gc_policy.py)
            print(f"bookies ready ({config.storage.bookies})", flush=True)
            async for signum in signals:
                log.info("bookies stopping", extra={"signal": signal.Signals(signum).name})
                break


def main() -> int:
    job: dict[str, Any] = pickle.loads(sys.stdin.buffer.read())
    die_with_parent(int(job["parent"]))
    config: Config = job["config"]
    setup_logging(config.log.level, config.log.format)
    print(f"ledgerwire {job['name']} started (pid {os.getpid()})", flush=True)
    try:
        if job["role"] == "bookies":
            trio.run(run_bookies, config, job["metadata_url"])
        else:
            trio.run(partial(run_broker, config, job["metadata_url"], job["layout"],
                             node_worker=True, bookie_indexes=job.get("bookies", ()),
                             node_brokers=job.get("node_brokers", ())))
    except KeyboardInterrupt:
        pass
    except (OSError, ValueError, BaseExceptionGroup) as exc:
        named = config_error_of(exc)
        if named is None and isinstance(exc, BaseExceptionGroup):
            raise
        log.error("%s cannot start: %s", job["role"], named or exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
