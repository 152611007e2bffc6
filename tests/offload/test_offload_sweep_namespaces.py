"""The staged-file sweep also covers every namespace's own offload_directory: a crash while
offloading there leaves a staged file just as at [offload]'s place."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import trio

from gateway.topics.namespaces import NamespaceRegistry
from gateway.topics.offload_service import _STAGED_GRACE_S, OffloadService
from ledger_backend.metadata import open_store
from ledger_backend.offload import FilesystemOffloader


def _crashed(offloader: FilesystemOffloader, key: str) -> Path:
    staged = offloader.stage(key)
    staged.write([b"half an object"])
    old = os.stat(staged.tmp).st_mtime - _STAGED_GRACE_S - 60
    os.utime(staged.tmp, (old, old))
    return staged.tmp


def test_staged_files_at_a_namespaces_own_directory_are_swept(tmp_path: Path) -> None:
    configured = FilesystemOffloader(tmp_path / "tier")
    own = FilesystemOffloader(tmp_path / "ns-tier")
    at_configured = _crashed(configured, "public%2Fdefault%2Ft-0/5-aaa.lwo")
    at_own = _crashed(own, "acme%2Fsales%2Ft-0/7-bbb.lwo")
    fresh = own.stage("acme%2Fsales%2Ft-0/8-ccc.lwo")
    fresh.write([b"being written"])

    async def main() -> int:
        store = await open_store("memory:")
        try:
            registry = NamespaceRegistry(store)
            await registry.load()
            await registry.create_tenant("acme")
            await registry.create_namespace(
                "acme/sales", {"offload_directory": str(tmp_path / "ns-tier")})
            await registry.create_namespace("acme/other")  # no place of its own
            service = OffloadService(SimpleNamespace(namespaces=registry),
                                     offloader=configured)
            return await service.sweep_staged(_STAGED_GRACE_S)
        finally:
            await store.close()

    assert trio.run(main) == 2
    assert not at_configured.exists() and not at_own.exists()
    assert fresh.tmp.exists()  # an offload in progress keeps its file
    fresh.discard()
