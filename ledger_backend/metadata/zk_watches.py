"""Keeping a metadata Watcher's one-shot ZooKeeper watches armed, for the kazoo-backed store.

kazoo 2.11 has no persistent watches, so each Watcher gets an ArmedWatch: an exists-watch
(created/changed/deleted) and, for children=True, a child watch. A fired watch is re-armed from
the kazoo callback thread (non-blocking *_async calls) and the event reaches Trio only once the
server has answered the re-arm, so a reader that re-reads after an event cannot miss a later
change (ZooKeeper answers one session's requests in order). Re-arming after a reconnection and
failing watchers on a lost session are zookeeper.py's (it owns the session).

With zookeeper.py and zk_session.py one of the only modules importing kazoo. This module must
never block a kazoo callback thread nor touch a Trio object from one: events go through the
store's ``to_trio``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.paths import _prefix_root
from kazoo.protocol.states import EventType, WatchedEvent

from .store import Watcher, WatchEvent

__all__ = ["ArmedWatch"]

log = logging.getLogger("ledger_backend.metadata.zookeeper")  # the store's log, as before

_EVENT_KINDS = {
    EventType.CREATED: "created",
    EventType.CHANGED: "changed",
    EventType.DELETED: "deleted",
}


class ArmedWatch:
    """Keeps a Watcher's one-shot ZooKeeper watches armed (see the module docstring)."""

    def __init__(self, client: KazooClient, to_trio: Callable[..., None],
                 watcher: Watcher) -> None:  # fmt: skip
        self.client = client
        self.to_trio = to_trio  # runs a callable on the Trio thread, from any thread
        self.watcher = watcher
        self.path = watcher.path
        # bound once so kazoo's watcher sets see one object per watch
        self.on_exists: Callable[[WatchedEvent], None] = self._on_exists
        self.on_children: Callable[[WatchedEvent], None] = self._on_children

    def arm_async(self, *, exists: bool = True, children: bool = True) -> list[Any]:
        """Queue the watch requests (safe from any thread); returns their async results."""
        client = self.client
        results = []
        if exists:
            results.append(client.exists_async(self.path, watch=self.on_exists))
        if children and self.watcher.children:
            results.append(client.get_children_async(self.path, watch=self.on_children))
        return results

    def rearm_then_deliver(self, event: WatchEvent, *, exists: bool, children: bool) -> None:
        """Re-arm, and hand the event to Trio only once the server has answered the re-arm:
        a change made after the reader saw the event is then always reported."""
        try:
            results = self.arm_async(exists=exists, children=children)
        except Exception:  # a closed client: the watcher is ending anyway
            log.debug("re-arming watch on %s failed", self.path, exc_info=True)
            results = []
        if not results:
            self.to_trio(self.watcher.deliver, event)
            return
        pending = [len(results)]
        lock = threading.Lock()

        def answered(_result: Any) -> None:  # kazoo callback thread
            with lock:
                pending[0] -= 1
                last = pending[0] == 0
            if last:
                self.to_trio(self.watcher.deliver, event)

        for result in results:
            result.rawlink(answered)

    def _on_exists(self, event: WatchedEvent) -> None:  # kazoo thread
        if not self.watcher.active or event.type not in _EVENT_KINDS:
            return  # EventType.NONE: connection state, handled by the state listener
        self.rearm_then_deliver(
            WatchEvent(self.path, _EVENT_KINDS[event.type]),
            exists=True,
            children=event.type == EventType.CREATED,
        )

    def _on_children(self, event: WatchedEvent) -> None:  # kazoo thread
        if not self.watcher.active or event.type != EventType.CHILD:
            return  # DELETED is reported by the exists-watch
        self.rearm_then_deliver(WatchEvent(self.path, "children"), exists=False, children=True)

    def forget(self) -> None:
        """Drop kazoo's references to our callbacks (best effort: kazoo has no public API)."""
        key = _prefix_root(self.client.chroot, self.path)
        for registry, callback in ((self.client._data_watchers, self.on_exists),
                                   (self.client._child_watchers, self.on_children)):
            watchers = registry.get(key)
            if watchers is not None:
                watchers.discard(callback)
