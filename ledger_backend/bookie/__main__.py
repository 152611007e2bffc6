"""Run one bookie process: ``python -m ledger_backend.bookie --data-dir D --port P --metadata URL``.

Opens the metadata store, checks the bookie identity cookie (cookie.py), opens the durable
storage engine (``open_bookie_storage``) and serves the bookie protocol until SIGINT/SIGTERM,
then drains connections, checkpoints and closes the storage.  ``--storage memory`` serves the
in-memory twin instead (tests and demos only: nothing survives the process; no cookie).

``--bookie-tls-certfile/keyfile`` serve TLS only (``--bookie-tls-cafile``: client certificates
signed by that CA required); ``--bookie-secret-file`` makes every connection authenticate with
the cluster's shared bookie secret (bookie/auth.py); without it the bookie serves anyone who
reaches it (logged at start).

This module must never serve a data directory whose cookie check failed.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from ledger_backend.bookie.auth import BookieSecret
from ledger_backend.bookie.cookie import CookieError, check_cookie
from ledger_backend.bookie.memory_storage import MemoryBookieStorage
from ledger_backend.bookie.protocol import DEFAULT_MAX_FRAME_BYTES, BookieAddress
from ledger_backend.bookie.server import serve_bookie
from ledger_backend.bookie.storage_api import BookieStorage, BookieStorageConfig
from ledger_backend.bookie.tls import BookieTls, add_tls_arguments
from ledger_backend.metadata import open_store
from ledger_backend.metadata.store import MetadataStore, NoNodeError
from ledger_backend.secret_files import read_secret_file

logger = logging.getLogger("ledger_backend.bookie")

DEFAULT_PORT = 3181
_LEDGERS_PATH = "/ledgerwire/ledgers"  # ledger_backend.client.ledger_metadata.LEDGERS_PATH


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ledger_backend.bookie", description="Run one ledgerwire bookie."
    )
    parser.add_argument("--data-dir", type=Path, help="journal, entry logs, index and cookie")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    parser.add_argument("--metadata", required=True, help='e.g. zk://h:2181/ledgerwire, "memory:"')
    parser.add_argument("--bookie-id", help='stable identity (default: "advertised-host:port")')
    parser.add_argument("--advertised-host", help="host name clients use (default: --host)")
    parser.add_argument("--storage", choices=("disk", "memory"), default="disk")
    parser.add_argument(
        "--unsafe-no-fsync", action="store_true", help="skip journal fsyncs (benchmarks only)"
    )
    parser.add_argument(
        "--restore-metadata-cookie",
        action="store_true",
        help="re-create a missing metadata cookie from the data directory",
    )
    parser.add_argument("--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME_BYTES)
    parser.add_argument("--drain-timeout", type=float, default=5.0, help="seconds")
    parser.add_argument("--log-level", default="INFO")
    add_bookie_security_arguments(parser)
    parser.set_defaults(storage_config=None, bookie_secret=None)
    args = parser.parse_args(argv)
    if args.storage == "disk" and args.data_dir is None:
        parser.error("--data-dir is required with --storage disk")
    if args.bookie_id is None and args.port == 0:
        parser.error("--port 0 needs an explicit --bookie-id (the identity must be stable)")
    return args


def add_bookie_security_arguments(parser: argparse.ArgumentParser) -> None:
    """The bookie secret and TLS flags, shared with `ledgerwire bookie` and the commands
    that reach bookies (autorecovery, recover)."""
    parser.add_argument(
        "--bookie-secret-file", type=Path, metavar="PATH",
        help="file whose first line is the cluster's bookie secret (>= 16 bytes, mode 0600); "
             "clients must authenticate with it",
    )  # fmt: skip
    add_tls_arguments(parser)
    parser.add_argument(
        "--ledger-password-file", type=Path, metavar="PATH",
        help="file whose first line is the ledger password (storage.ledger_password_file): "
             "auto-recovery presents its ledgers' master keys",
    )  # fmt: skip


def ledger_password(args: argparse.Namespace) -> bytes | None:
    """The --ledger-password-file's password (a WARNING if others can read the file)."""
    if not args.ledger_password_file:
        return None
    return read_secret_file(args.ledger_password_file, "ledger password").encode()


def _active_ledgers(store: MetadataStore) -> Callable[[], Awaitable[set[int]]]:
    """The ledger ids that exist in metadata (for the storage's garbage collector).

    Errors propagate: the collector must skip a round, never treat "unknown" as "none".
    """

    async def active() -> set[int]:
        try:
            names = await store.children(_LEDGERS_PATH)
        except NoNodeError:
            return set()  # no ledger was ever created in this cluster
        return {int(name) for name in names if name.isdigit()}

    return active


@asynccontextmanager
async def _open_storage(
    args: argparse.Namespace, store: MetadataStore
) -> AsyncIterator[BookieStorage]:
    if args.storage == "memory":
        logger.warning("serving IN-MEMORY bookie storage: nothing survives this process")
        yield MemoryBookieStorage()
        return
    from ledger_backend.bookie.storage import open_bookie_storage

    # `ledgerwire bookie` gives the engine's settings ([storage]: gateway/config/bookie_storage.py)
    config = args.storage_config or BookieStorageConfig(data_dir=args.data_dir,
                                                        fsync=not args.unsafe_no_fsync)
    async with open_bookie_storage(config, _active_ledgers(store)) as storage:
        yield storage


async def run_bookie(args: argparse.Namespace, *,
                     ready: Callable[[], None] | None = None) -> None:
    """Serve one bookie until SIGINT/SIGTERM; `ready` is called once it listens (the gateway's
    CLI settles the process's heap there: gateway/process/gc_policy.py)."""
    advertised_host = args.advertised_host or args.host
    bookie_id = args.bookie_id or str(BookieAddress(advertised_host, args.port))
    secret = BookieSecret.load(args.bookie_secret, args.bookie_secret_file)
    tls = BookieTls.from_args(args)
    if secret is None:
        logger.warning("bookie %s: no --bookie-secret-file: any client that reaches this bookie "
                       "can read, add and fence", bookie_id)  # fmt: skip
    store = await open_store(args.metadata)
    try:
        if args.storage == "disk":
            cookie = await check_cookie(
                args.data_dir, store, bookie_id,
                allow_missing_metadata_cookie=args.restore_metadata_cookie,
            )  # fmt: skip
            logger.info("bookie %s: instance %s", bookie_id, cookie.instance_id)
        async with _open_storage(args, store) as storage:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with trio.open_nursery() as nursery:
                    address = await nursery.start(
                        lambda task_status: serve_bookie(
                            storage,
                            store,
                            args.host,
                            args.port,
                            bookie_id=bookie_id,
                            advertised_host=advertised_host,
                            max_frame_bytes=args.max_frame_bytes,
                            drain_timeout_s=args.drain_timeout,
                            secret=secret,
                            ssl_context=tls.server_context() if tls else None,
                            task_status=task_status,
                        )  # fmt: skip
                    )
                    if ready is not None:
                        ready()
                    print(f"bookie {bookie_id} listening on {address}", flush=True)
                    async for signum in signals:
                        logger.info("bookie %s: signal %d, shutting down", bookie_id, signum)
                        nursery.cancel_scope.cancel()
                        break
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


def run_process(serve: Callable[[argparse.Namespace], Awaitable[None]],
                args: argparse.Namespace) -> int:
    """Log at --log-level and run `serve(args)` (a bookie, alone or with auto-recovery:
    `ledgerwire bookie`) until it stops; the process's exit status.  A bookie that refuses to
    start (a cookie that does not match, its port taken, an unreadable or short secret) says
    why in one line and exits 2, without a traceback; Ctrl-C exits 130."""
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        trio.run(serve, args)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        refusal = _refusal(exc)
        if refusal is None:
            raise
        print(f"bookie refused to start: {refusal}", file=sys.stderr)
        return 2
    return 0


def _refusal(exc: BaseException) -> BaseException | None:
    """Why the bookie refused to start, if `exc` is such a reason: a cookie that does not
    match, an address it cannot bind, an unreadable or short secret; also when it comes out
    of a nursery (the listener's) as the only exception of a group."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, (CookieError, OSError, ValueError)) else None


def main(argv: list[str] | None = None) -> int:
    return run_process(run_bookie, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
