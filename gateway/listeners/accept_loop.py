"""The accept loop of the Kafka and RocketMQ 4.x listeners (one per listening socket).

An accept() that fails for want of resources (EMFILE, ENFILE: out of file descriptors;
ENOMEM, ENOBUFS: out of memory for a socket) means "not now", not "the listener is broken":
one ERROR line without a traceback, a short back-off, and the loop accepts again while the
connections it already handed out go on.  Any other error ends the loop: the listener is gone.
trio.serve_listeners does the same but logs a traceback each time; the gRPC listener uses it.

This module must never read or write a connection: each goes to `serve`, in `connections`.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio

CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
BACKOFF_S = 0.1


async def accept_forever(listener: trio.SocketListener, connections: trio.Nursery,
                         serve: Callable[[trio.SocketStream], Awaitable[object]],
                         log: logging.Logger) -> NoReturn:
    """Accept connections on `listener` and start `serve(stream)` in `connections` for each,
    until cancelled (or the listener fails other than for capacity); `log` is the listener's."""
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            if exc.errno not in CAPACITY_ERRNOS:
                raise
            log.error("accept failed, backing off", extra={"error": str(exc)})
            await trio.sleep(BACKOFF_S)
            continue
        connections.start_soon(serve, stream)
