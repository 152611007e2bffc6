"""Where a Spark job finds ledgerwire: the `ledgerwire.metadata` option, read-only.

`ledgerwire.metadata` is one of
  - "zk://host:2181/chroot"          a cluster's ZooKeeper ensemble (a normal kazoo session;
                                      the bridge only ever reads from it);
  - a `ledgerwire standalone` data directory (it holds metadata/ and bookies/<i>/);
  - "embedded:/dir" or "embedded-ro:/dir", or the metadata directory itself (it holds
    metadata.db).

The embedded store of a running standalone is locked by that process (an exclusive flock on
metadata.lock), and opening it as a session would drop its ephemeral nodes and write; so an
embedded directory always resolves to "embedded-ro:<metadata dir>", which `open_store` serves
with `ledger_backend.metadata.embedded_readonly.ReadOnlyEmbeddedStore` (read-only sqlite, no
lock, every write raises ReadOnlyStoreError; re-exported here).

This module must never write to a metadata store, never take the embedded store's lock, and
never keep a kazoo session open longer than the caller's `with` block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ledger_backend.metadata import MetadataStore, open_store
from ledger_backend.metadata.embedded_readonly import URL_PREFIX as READONLY_URL_PREFIX
from ledger_backend.metadata.embedded_readonly import (
    ReadOnlyEmbeddedStore,
    ReadOnlyStoreError,
)
from ledger_backend.metadata.sqlite_tree import DB_FILE
from spark_bridge.offloaded_ledgers import OffloadSpec, offload_spec

METADATA_OPTION = "ledgerwire.metadata"
BOOKIE_SECRET_FILE_OPTION = "ledgerwire.bookieSecretFile"
READ_TICKET_OPTION = "ledgerwire.readTicket"
BOOKIE_TLS_OPTIONS = ("ledgerwire.bookieTlsCertFile", "ledgerwire.bookieTlsKeyFile",
                      "ledgerwire.bookieTlsCaFile")  # as storage.bookie_tls_* of the cluster


@dataclass(frozen=True)
class ConnectionSpec:
    """Resolved `ledgerwire.metadata`: the store to read, and (standalone only) the bookie
    data directories that hold the entries when the standalone's bookies are not running."""

    metadata_url: str          # "zk://..." or "embedded-ro:<metadata dir>" (open_store URLs)
    bookie_dirs: tuple[str, ...] = ()
    bookie_secret_file: str | None = None  # the cluster's bookie secret: reads authenticate
    bookie_tls: tuple[str, str, str] = ("", "", "")  # certificate, key, CA: TLS to bookies
    offload: OffloadSpec | None = None  # the tiered-storage store (offloaded_ledgers.py)
    # a read ticket (ledger_backend/bookie/read_ticket.py, its text form): bookies are read
    # with it instead of the secret (read_tickets.py); never shown by repr
    read_ticket: str | None = field(default=None, repr=False)

    @property
    def is_embedded(self) -> bool:
        return self.metadata_url.startswith(READONLY_URL_PREFIX)


def resolve_connection(value: str | None, options: Mapping[str, str] | None = None
                       ) -> ConnectionSpec:  # fmt: skip
    """Turn the metadata option's value, and the bookie security options in `options` (names
    lower-cased, as Spark matches them), into a ConnectionSpec; ValueError names the option."""
    spec = _resolve_metadata(value)
    lowered = {k.lower(): v for k, v in (options or {}).items()}
    tls = tuple(lowered.get(name.lower(), "") for name in BOOKIE_TLS_OPTIONS)
    data_dir = Path(spec.metadata_url[len(READONLY_URL_PREFIX):]).parent \
        if spec.is_embedded else None  # fmt: skip
    return replace(spec, bookie_secret_file=lowered.get(BOOKIE_SECRET_FILE_OPTION.lower()),
                   read_ticket=lowered.get(READ_TICKET_OPTION.lower()) or None,
                   bookie_tls=(tls[0], tls[1], tls[2]),
                   offload=offload_spec(lowered, data_dir))


def _resolve_metadata(value: str | None) -> ConnectionSpec:
    if value is None or not value.strip():
        raise ValueError(
            f"option '{METADATA_OPTION}' is required: a ledgerwire standalone data directory "
            "or a zk://host:port/chroot URL"
        )
    value = value.strip()
    if value.startswith("zk://"):
        return ConnectionSpec(value)
    for prefix in ("embedded-ro:", "embedded:"):
        if value.startswith(prefix):
            value = value[len(prefix):]
            if value.startswith("//"):
                value = value[2:]
    root = Path(value).expanduser()
    if (root / "metadata" / DB_FILE).is_file():
        return ConnectionSpec(f"embedded-ro:{(root / 'metadata').resolve()}",
                              _bookie_dirs(root / "bookies"))
    if (root / DB_FILE).is_file():
        return ConnectionSpec(f"embedded-ro:{root.resolve()}",
                              _bookie_dirs(root.parent / "bookies"))
    raise ValueError(
        f"option '{METADATA_OPTION}'={value!r}: no ledgerwire metadata there (expected "
        f"{root / 'metadata' / DB_FILE} or {root / DB_FILE}) and not a zk:// URL"
    )


def _bookie_dirs(bookies: Path) -> tuple[str, ...]:
    """A standalone's bookie directories, bookies/0, bookies/1, ... in index order."""
    if not bookies.is_dir():
        return ()
    dirs = sorted((p for p in bookies.iterdir() if p.is_dir()),
                  key=lambda p: (len(p.name), p.name))  # fmt: skip
    return tuple(str(d.resolve()) for d in dirs)


def open_embedded_sync(spec: ConnectionSpec) -> ReadOnlyEmbeddedStore:
    """The read-only embedded view for blocking callers (Spark executors, no Trio)."""
    if not spec.is_embedded:
        raise ValueError(f"{spec.metadata_url} is not an embedded metadata directory")
    return ReadOnlyEmbeddedStore(spec.metadata_url[len(READONLY_URL_PREFIX):])


async def open_readonly_store(spec: ConnectionSpec) -> MetadataStore:
    """A store to read from: "embedded-ro:" (read-only sqlite, no lock) or kazoo for ZooKeeper;
    both through `open_store`."""
    return await open_store(spec.metadata_url)


__all__ = [
    "BOOKIE_SECRET_FILE_OPTION", "BOOKIE_TLS_OPTIONS", "METADATA_OPTION", "ConnectionSpec",
    "ReadOnlyEmbeddedStore", "ReadOnlyStoreError",
    "open_embedded_sync", "open_readonly_store", "resolve_connection",
]
