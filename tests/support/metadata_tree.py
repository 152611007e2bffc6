"""Every node path under a metadata store path: what a test looks through for records left."""

from __future__ import annotations

from ledger_backend.metadata import MetadataStore
from ledger_backend.metadata.store import NoNodeError


async def every_path(store: MetadataStore, path: str = "/") -> list[str]:
    """The paths below `path`, depth first (a node deleted while walked is left out)."""
    try:
        children = await store.children(path)
    except NoNodeError:
        return []
    out = []
    for child in children:
        below = f"{path.rstrip('/')}/{child}"
        out += [below, *await every_path(store, below)]
    return out
