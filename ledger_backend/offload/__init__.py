"""Tiered storage: closed ledgers offloaded to a directory or an object store, read back
transparently. offloader.py is the interface, filesystem.py and object_store.py the drivers,
object_format.py the versioned object layout, object_reader.py the cached range reads.
The managed ledger decides what to offload and records where (managed_ledger/offloading.py).
"""

from ledger_backend.offload.filesystem import FilesystemOffloader
from ledger_backend.offload.object_format import ObjectFormatError
from ledger_backend.offload.object_reader import OffloadedReader, OffloadLocation
from ledger_backend.offload.offloader import (
    ObjectMissingError,
    ObjectStoreUnavailableError,
    OffloadedObjectDamagedError,
    OffloadedReadError,
    Offloader,
    OffloadError,
)

__all__ = [
    "FilesystemOffloader",
    "ObjectFormatError",
    "ObjectMissingError",
    "ObjectStoreUnavailableError",
    "OffloadError",
    "OffloadLocation",
    "Offloader",
    "OffloadedObjectDamagedError",
    "OffloadedReadError",
    "OffloadedReader",
]
