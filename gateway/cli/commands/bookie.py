"""`ledgerwire bookie`: one bookie process (ledger_backend/bookie), optionally with auto-recovery
(an auditor candidate and a replication worker) in the same process.

Its storage engine takes the [storage] settings a standalone's bookies take
(gateway/config/bookie_storage.py): from `--config` (the same TOML file; only [storage] is
used), each overridden by its flag.  The bookie secret, TLS files and ledger password come
from their flags, else from that [storage] table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import trio

from gateway.config.bookie_storage import ENGINE_SETTINGS, bookie_engine_config
from gateway.config.loading import load_config
from gateway.config.settings import Config, metadata_url_with_session_timeout

NAME = "bookie"
HELP = "one bookie: journal, entry logs and index, registered in the metadata store"


def add_autorecovery_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lost-bookie-delay", type=float, default=30.0, metavar="S",
                   help="seconds a bookie must be missing before its ledgers are re-replicated")
    p.add_argument("--open-ledger-grace", type=float, default=30.0, metavar="S",
                   help="seconds before an open ledger on a lost bookie is fenced")
    p.add_argument("--audit-interval", type=float, default=10.0, metavar="S")


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    """--config and a flag per storage-engine setting (dest "storage.<setting>")."""
    parser.add_argument("--config", type=Path, metavar="TOML",
                        help="configuration file: its [storage] settings (flags override them)")
    for setting, text in ENGINE_SETTINGS.items():
        parser.add_argument(f"--{setting.replace('_', '-')}", dest=f"storage.{setting}",
                            type=float if setting.endswith("_ms") else int, metavar="N",
                            help=f"{text} ([storage] {setting})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata", required=True, help="zk://host:port/chroot")
    parser.add_argument("--zk-session-timeout", type=float, metavar="S",
                        help="ZooKeeper session timeout: how soon a dead bookie is seen as gone "
                             "(default 10; a ?session_timeout_s=N in --metadata wins)")
    parser.add_argument("--data-dir", type=Path, help="journal, entry logs, index and cookie")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=3181)
    parser.add_argument("--advertised-host")
    parser.add_argument("--storage", choices=("disk", "memory"), default="disk")
    parser.add_argument("--unsafe-no-fsync", action="store_true")
    parser.add_argument("--restore-metadata-cookie", action="store_true")
    parser.add_argument("--max-frame-bytes", type=int, default=None)
    parser.add_argument("--drain-timeout", type=float, default=5.0)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--autorecovery", action=argparse.BooleanOptionalAction, default=True,
                        help="run an auditor candidate and a replication worker (default on)")
    add_autorecovery_arguments(parser)
    add_bookie_security_arguments(parser)
    add_storage_arguments(parser)


def apply_storage_config(args: argparse.Namespace) -> Config:
    """Read --config and the storage flags into `args`: the engine's settings
    (args.storage_config) and, where their flags were not given, the [storage] table's secret,
    TLS files and ledger password.  ConfigError for a bad file or value."""
    config = load_config(args.config, {k: v for k, v in vars(args).items()
                                       if k.startswith("storage.")})
    storage = config.storage
    if args.unsafe_no_fsync:
        storage.fsync = False
    args.storage_config = (bookie_engine_config(storage, args.data_dir)
                           if args.data_dir is not None else None)
    # a secret file named by its flag wins over a secret written in the file
    args.bookie_secret = None if args.bookie_secret_file else (storage.bookie_secret or None)
    for flag, value in (("bookie_secret_file", storage.bookie_secret_file),
                        ("bookie_tls_certfile", storage.bookie_tls_certfile),
                        ("bookie_tls_keyfile", storage.bookie_tls_keyfile),
                        ("bookie_tls_cafile", storage.bookie_tls_cafile),
                        ("ledger_password_file", storage.ledger_password_file)):
        if not getattr(args, flag) and value:
            setattr(args, flag, value)
    return config


def add_bookie_security_arguments(parser: argparse.ArgumentParser) -> None:
    from ledger_backend.bookie.__main__ import add_bookie_security_arguments as add_security

    add_security(parser)


async def run_bookie_process(args: argparse.Namespace) -> None:
    from gateway.process.gc_policy import settle_heap
    from ledger_backend.bookie.__main__ import run_bookie

    async with trio.open_nursery() as nursery:
        if args.autorecovery:
            nursery.start_soon(run_autorecovery_process, args)
        # once it listens: start-up's heap frozen, the collector's thresholds, as a broker's
        await run_bookie(args, ready=settle_heap)
        nursery.cancel_scope.cancel()


async def run_autorecovery_process(args: argparse.Namespace) -> None:
    from ledger_backend.autorecovery.auditor import AuditorConfig
    from ledger_backend.autorecovery.replication_worker import WorkerConfig, run_autorecovery
    from ledger_backend.bookie.__main__ import ledger_password
    from ledger_backend.bookie.auth import BookieSecret
    from ledger_backend.bookie.tls import BookieTls
    from ledger_backend.client.bookkeeper import BookKeeper
    from ledger_backend.metadata import open_store

    secret = BookieSecret.load(getattr(args, "bookie_secret", None), args.bookie_secret_file)
    store = await open_store(args.metadata)
    try:
        async with BookKeeper(store, bookie_secret=secret, bookie_tls=BookieTls.from_args(args),
                              ledger_password=ledger_password(args)) as bk:
            await run_autorecovery(
                store, bk,
                AuditorConfig(lost_bookie_delay_s=args.lost_bookie_delay,
                              audit_interval_s=args.audit_interval),
                WorkerConfig(open_ledger_grace_s=args.open_ledger_grace,
                             poll_interval_s=min(5.0, args.audit_interval)))
    finally:
        with trio.CancelScope(shield=True):
            await store.close()


def run(args: argparse.Namespace) -> int:
    from ledger_backend.bookie.__main__ import run_process
    from ledger_backend.bookie.protocol import DEFAULT_MAX_FRAME_BYTES

    if args.storage == "disk" and args.data_dir is None:
        print("ledgerwire bookie: --data-dir is required with --storage disk", file=sys.stderr)
        return 2
    # A bookie is known by its advertised address: ledger ensembles name it so, and its
    # cookie binds the data directory to it (there is no separate --bookie-id).
    args.bookie_id = None
    apply_storage_config(args)
    args.metadata = metadata_url_with_session_timeout(args.metadata, args.zk_session_timeout)
    if args.max_frame_bytes is None:
        args.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES
    return run_process(run_bookie_process, args)
