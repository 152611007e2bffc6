"""The accept loop of the Kafka and RocketMQ 4.x listeners: out of file descriptors (or memory
for a socket) is one ERROR line without a traceback and a back-off, then accepting again; any
other accept error ends the loop."""

from __future__ import annotations

import errno
import logging
from typing import cast

import pytest
import trio

from gateway.listeners.accept_loop import accept_forever


class Listener:
    """Answers accept() from a script: an errno to raise, or a stream to hand out."""

    def __init__(self, script: list[int | str]) -> None:
        self.script = script

    async def accept(self) -> trio.SocketStream:
        await trio.lowlevel.checkpoint()
        step = self.script.pop(0)
        if isinstance(step, int):
            raise OSError(step, "scripted")
        return cast(trio.SocketStream, step)


async def test_capacity_errors_back_off_and_other_errors_end_the_loop(
        autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture) -> None:
    served: list[str] = []

    async def serve(stream: object) -> None:
        served.append(cast(str, stream))

    log = logging.getLogger("ledgerwire.test.listener")
    listener = Listener(["a", errno.EMFILE, errno.ENOBUFS, "b", errno.EBADF])
    with caplog.at_level(logging.INFO, logger=log.name):
        async with trio.open_nursery() as connections:
            with pytest.raises(OSError) as raised:
                await accept_forever(cast(trio.SocketListener, listener), connections, serve,
                                     log)
    assert raised.value.errno == errno.EBADF
    assert served == ["a", "b"]
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("ERROR", "accept failed, backing off", None)] * 2
