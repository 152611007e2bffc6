"""Who writes a frame on a RocketMQ connection holds its write gate, so frames never interleave.

Unlike trio.Lock, the gate belongs to no task: a response written from a completion callback
(a send answered without a task of its own, see remoting_connection.py) takes it in whatever
task the callback runs in, and when the socket takes only part of the frame, a task started
for the rest gives it back.

This module must never touch a socket itself.
"""

from __future__ import annotations

import trio


class WriteGate:
    def __init__(self) -> None:
        self.taken = False
        self._waiting = trio.lowlevel.ParkingLot()

    def take_now(self) -> bool:
        """Take the gate if it is free (no wait); False when someone holds it."""
        if self.taken:
            return False
        self.taken = True
        return True

    async def take(self) -> None:
        """Wait until the gate is free and take it."""
        while self.taken:
            await self._waiting.park()
        self.taken = True

    def give_back(self) -> None:
        self.taken = False
        self._waiting.unpark()
