"""Durable cursors: a named mark-delete position plus integer properties, one metadata node each.

Every change is a compare-and-set on the node's version. A BadVersionError (or the node
vanishing) means another process writes this cursor: it raises CursorConflictError and the
cursor stops accepting changes. It must never overwrite a node it did not read last.
"""

from __future__ import annotations

import trio

from ledger_backend.managed_ledger.metadata_format import (
    CursorNode,
    decode_cursor,
    encode_cursor,
)
from ledger_backend.managed_ledger.types import CursorConflictError, Position
from ledger_backend.metadata.store import BadVersionError, MetadataStore, NoNodeError


class Cursor:
    """A consumer's durable position in one managed ledger (see the module docstring)."""

    def __init__(self, store: MetadataStore, path: str, node: CursorNode, version: int) -> None:
        self.name = node.name
        self.mark_delete_position: Position | None = node.mark_delete
        self.properties: dict[str, int] = dict(node.properties)
        self._store = store
        self._path = path
        self._version = version
        self._lock = trio.Lock()
        self._conflicted = False
        self._deleted = False

    @property
    def path(self) -> str:
        return self._path

    @property
    def version(self) -> int:
        return self._version

    async def mark_delete(
        self, position: Position, properties: dict[str, int] | None = None
    ) -> None:
        """Durably move the mark-delete position (any direction: Kafka commits may rewind).

        properties=None keeps the current properties; a dict replaces them. Returns once the
        metadata store has the new node.
        """
        position = Position(int(position[0]), int(position[1]))
        new_properties = dict(self.properties) if properties is None else dict(properties)
        for key, value in new_properties.items():
            if not isinstance(key, str) or not isinstance(value, int):
                raise TypeError(f"cursor properties map str -> int, got {key!r}: {value!r}")
        async with self._lock:
            self._check_usable()
            data = encode_cursor(
                CursorNode(name=self.name, mark_delete=position, properties=new_properties)
            )
            try:
                stat = await self._store.set(self._path, data, self._version)
            except (BadVersionError, NoNodeError) as exc:
                self._conflicted = True
                raise CursorConflictError(
                    f"cursor {self.name!r} at {self._path} was changed or removed by someone "
                    f"else (expected version {self._version})"
                ) from exc
            self._version = stat.version
            self.mark_delete_position = position
            self.properties = new_properties

    def _check_usable(self) -> None:
        if self._deleted:
            raise CursorConflictError(f"cursor {self.name!r} was deleted")
        if self._conflicted:
            raise CursorConflictError(
                f"cursor {self.name!r} lost a compare-and-set earlier; reopen it"
            )

    def _mark_deleted(self) -> None:
        self._deleted = True

    def __repr__(self) -> str:
        return (
            f"Cursor(name={self.name!r}, mark_delete_position={self.mark_delete_position!r}, "
            f"properties={self.properties!r})"
        )


async def load_cursor(store: MetadataStore, path: str) -> Cursor:
    data, stat = await store.get(path)
    return Cursor(store, path, decode_cursor(data, path), stat.version)


async def create_cursor(store: MetadataStore, path: str, name: str) -> Cursor:
    """Create the node for a new cursor (no position yet); NodeExistsError if it exists."""
    node = CursorNode(name=name, mark_delete=None, properties={})
    await store.create(path, encode_cursor(node))
    # A fresh node has version 0 (contract A); read it back anyway so we never assume.
    return await load_cursor(store, path)
