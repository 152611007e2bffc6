"""Reading ledgers that tiered storage moved to a directory or an object store, for Spark tasks.

A ledger whose managed-ledger record carries an "offload" entry (metadata format 3, see
ledger_backend/managed_ledger/metadata_format.py) has a verified copy in the offload store;
once its record says `bookie_deleted` that copy is the only one. The bridge reads such ledgers
straight from the store -- no broker, no bookie -- with ledger_backend's own OffloadedReader
(index, per-block CRC-32C, read-ahead, a bounded cache), given where the store is:

  ledgerwire.offload.directory        the filesystem driver's directory (for a standalone data
                                      directory, <data dir>/offload is used when it exists)
  ledgerwire.offload.bucket / .prefix / .endpoint / .region / .accessKeyId / .secretAccessKey
                                      the S3 driver (credentials may also come from AWS_* in
                                      the executors' environment)

These are the [offload] settings of the brokers' TOML. With a store configured every offloaded
ledger is read from it (even while a bookie copy still exists, so bookies see no load); without
one, ledgers still on bookies are read there and a ledger that lives only in the store is an
OffloadedLedgerError naming the ledger, its object and the options to set.

Spark's readers are plain threads, the OffloadedReader is Trio code: `OffloadedLedgers` runs it
in a Trio loop on its own daemon thread (trio_thread.py) and answers blocking calls. This
module must never write to the store, and never return a byte the object's checksums did not
verify.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from ledger_backend.offload import FilesystemOffloader, OffloadedReader, OffloadLocation
from ledger_backend.offload.offloader import Offloader
from spark_bridge.trio_thread import TrioThread

T = TypeVar("T")
OFFLOAD_OPTIONS = ("ledgerwire.offload.directory", "ledgerwire.offload.bucket",
                   "ledgerwire.offload.prefix", "ledgerwire.offload.endpoint",
                   "ledgerwire.offload.region", "ledgerwire.offload.accessKeyId",
                   "ledgerwire.offload.secretAccessKey")  # fmt: skip
_CACHE_BYTES = 64 << 20
_READAHEAD_BYTES = 8 << 20


class OffloadedLedgerError(ValueError):
    """A ledger lives only in tiered storage and the read was given no store to find it in
    (or the store could not serve it); the message names the ledger, the object and what to
    set."""


@dataclass(frozen=True)
class OffloadSpec:
    """Where the offload store is (the [offload] settings), as the job's options give it."""

    directory: str = ""
    bucket: str = ""
    prefix: str = ""
    endpoint: str = ""
    region: str = "us-east-1"
    access_key_id: str = ""
    secret_access_key: str = ""

    @property
    def drivers(self) -> tuple[str, ...]:
        return tuple(name for name, on in (("filesystem", bool(self.directory)),
                                           ("s3", bool(self.bucket))) if on)  # fmt: skip

    def __repr__(self) -> str:  # never the secret (plans and logs show options)
        return (f"OffloadSpec(directory={self.directory!r}, bucket={self.bucket!r}, "
                f"prefix={self.prefix!r}, endpoint={self.endpoint!r})")


def offload_spec(options: Mapping[str, str], data_dir: Path | None = None) -> OffloadSpec | None:
    """The offload store from the options (names lower-cased); a standalone's default
    <data dir>/offload when none is named; None when there is no store to read."""
    get = {k.lower(): v for k, v in options.items()}.get
    spec = OffloadSpec(
        directory=get("ledgerwire.offload.directory", "") or "",
        bucket=get("ledgerwire.offload.bucket", "") or "",
        prefix=get("ledgerwire.offload.prefix", "") or "",
        endpoint=get("ledgerwire.offload.endpoint", "") or "",
        region=get("ledgerwire.offload.region", "") or "us-east-1",
        access_key_id=get("ledgerwire.offload.accesskeyid", "") or "",
        secret_access_key=get("ledgerwire.offload.secretaccesskey", "") or "",
    )
    if not spec.directory and data_dir is not None and (data_dir / "offload").is_dir():
        spec = replace(spec, directory=str((data_dir / "offload").resolve()))
    return spec if spec.drivers else None


def _offloaders(spec: OffloadSpec) -> dict[str, Offloader]:
    out: dict[str, Offloader] = {}
    if spec.directory:
        out["filesystem"] = FilesystemOffloader(spec.directory)
    if spec.bucket:
        from ledger_backend.offload.object_store import ObjectStoreOffloader

        out["s3"] = ObjectStoreOffloader.s3(
            spec.bucket, prefix=spec.prefix, region=spec.region,
            endpoint=spec.endpoint or None, access_key_id=spec.access_key_id or None,
            secret_access_key=spec.secret_access_key or None)  # fmt: skip
    return out


@dataclass(frozen=True)
class OffloadedLedger:
    """One offloaded ledger as a split carries it to its task."""

    ledger_id: int
    driver: str
    key: str
    size: int
    last_entry: int
    place: tuple[tuple[str, str], ...] = ()  # OffloadRecord.location: where it really is


class OffloadedLedgers:
    """Blocking reads of offloaded ledgers (a Trio loop on a daemon thread); a context
    manager."""

    def __init__(self, spec: OffloadSpec, timeout_s: float = 60.0) -> None:
        self.spec = spec
        self.timeout_s = timeout_s
        self.ledgers: dict[int, OffloadedLedger] = {}
        self._reader = OffloadedReader(_offloaders(spec), cache_bytes=_CACHE_BYTES,
                                       readahead_bytes=_READAHEAD_BYTES)  # fmt: skip
        self._loop = TrioThread("ledgerwire-offload", call_timeout_s=timeout_s)

    def add(self, ledger: OffloadedLedger) -> None:
        self.ledgers[ledger.ledger_id] = ledger

    def can_read(self, driver: str) -> bool:
        return driver in self.spec.drivers

    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        if not self._loop.running:
            self._loop.start()
        return self._loop.call(fn, *args)

    def read(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries first..last of an added ledger; OffloadedReadError names the object."""
        ledger = self.ledgers[ledger_id]
        where = OffloadLocation(ledger.driver, ledger.key, ledger.size, ledger.place)
        return self._call(self._reader.read, where, ledger_id, first, last)

    def close(self) -> None:
        self._loop.stop()

    def __enter__(self) -> OffloadedLedgers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["OFFLOAD_OPTIONS", "OffloadSpec", "OffloadedLedger", "OffloadedLedgerError",
           "OffloadedLedgers", "offload_spec"]
