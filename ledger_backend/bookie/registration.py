"""The bookie's availability registration in the metadata store.

A serving bookie keeps an ephemeral node at /ledgerwire/bookies/available/<host:port> holding
its bookie id and address: created before it is offered to writers, re-created after a LOST
session (retrying until it succeeds), deleted at shutdown. A node for the same address held by
another bookie id is a configuration error (BookieRegistrationError), never overwritten.

This module must never delete another bookie's registration.
"""

from __future__ import annotations

import json
import logging

import trio

from ledger_backend.metadata.store import (
    MetadataError,
    MetadataStore,
    MetadataUnavailableError,
    NodeExistsError,
    NoNodeError,
    SessionState,
)

logger = logging.getLogger("ledger_backend.bookie.server")

AVAILABLE_BOOKIES_PATH = "/ledgerwire/bookies/available"
_FIRST_REGISTRATION_TIMEOUT_S = 30.0
_REGISTRATION_RETRY_MAX_S = 5.0


class BookieRegistrationError(Exception):
    """The bookie cannot register itself (its address is taken by another bookie id)."""


class Registration:
    """The ephemeral availability node: created at start, re-created after a LOST session
    (retrying until it succeeds), deleted at shutdown."""

    def __init__(self, store: MetadataStore, path: str, data: bytes, bookie_id: str) -> None:
        self.store = store
        self.path = path
        self.data = data
        self.bookie_id = bookie_id
        # subscribed before the first registration so that no LOST after it is missed
        self._events = store.session_events()
        self._registered = False

    async def register_first(self) -> None:
        with trio.fail_after(_FIRST_REGISTRATION_TIMEOUT_S):
            await _register_with_retry(self.store, self.path, self.data, self.bookie_id)
        self._registered = True

    async def keep_registered(self) -> None:
        try:
            async for state in self._events:
                if state is SessionState.LOST and self._registered:
                    logger.warning(
                        "bookie %s: metadata session lost; registering again", self.bookie_id
                    )
                    await _register_with_retry(self.store, self.path, self.data, self.bookie_id)
        except trio.ClosedResourceError:
            pass  # deregister() closed the subscription: the bookie is stopping

    async def deregister(self) -> None:
        """Idempotent; never raises (an unreachable store lets the node expire instead)."""
        was_registered, self._registered = self._registered, False
        with trio.CancelScope(shield=True):
            await self._events.aclose()
            if was_registered:
                with trio.move_on_after(2.0):
                    try:
                        await self.store.delete(self.path)
                    except MetadataError:
                        pass


async def _register_with_retry(
    store: MetadataStore, path: str, data: bytes, bookie_id: str
) -> None:
    delay = 0.05
    while True:
        try:
            await _register(store, path, data, bookie_id)
            logger.info("bookie %s registered at %s", bookie_id, path)
            return
        except MetadataError as exc:  # unavailable, session expired, store reconnecting
            logger.warning("bookie %s: registration failed (%s); retrying", bookie_id, exc)
        await trio.sleep(delay)
        delay = min(delay * 2, _REGISTRATION_RETRY_MAX_S)


async def _register(store: MetadataStore, path: str, data: bytes, bookie_id: str) -> None:
    for _ in range(3):
        try:
            await store.create(path, data, ephemeral=True, make_parents=True)
            return
        except NodeExistsError:
            pass
        # an older node for this address: ours from a lost session, or a crashed previous
        # run whose session has not expired yet. Another bookie id there is a config error.
        try:
            existing, stat = await store.get(path)
        except NoNodeError:
            continue
        if _registered_bookie_id(existing) != bookie_id:
            raise BookieRegistrationError(
                f"{path} is registered by bookie {_registered_bookie_id(existing)!r}, "
                f"not {bookie_id!r}: two bookies advertise the same address"
            )
        try:
            await store.delete(path, stat.version)
        except NoNodeError:
            pass
    raise MetadataUnavailableError(f"could not take over {path}: it keeps coming back")


def _registered_bookie_id(data: bytes) -> str | None:
    try:
        value = json.loads(data).get("bookie_id")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None
