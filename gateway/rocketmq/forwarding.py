"""Forwarding RocketMQ per-queue requests of a bundle that moved to its new owner.

A RocketMQ 4.x client refreshes its topic routes only every 30 s (the C++ client: a timer in
MQClientFactory; an error answer does not trigger a refresh), so after a bundle moves to
another broker its clients keep sending to the old address.  Instead of answering "not served
here" (which an orderly producer cannot route around and which takes a moved queue out of
service until the refresh), the old owner relays the request to the bundle's new owner and
relays the answer back under the client's opaque.  The client notices nothing; its next route
refresh points it at the new owner directly.

Rules:
- Only per-queue requests are forwarded (`FORWARDED_CODES`), and only when the bundle is not
  served here; the request is checked against this broker's ACL first, so forwarding never lets
  in what this door would refuse (the owner checks it again).
- While the bundle is between owners (released here, not yet taken), the request waits up to
  `OWNER_WAIT_S` for an owner, then is served locally, forwarded, or refused as before.
- A forwarded request carries `FORWARDED_REMARK` and is never forwarded again (no loops when
  two brokers briefly disagree about the owner); the receiver waits for the bundle the same
  way, then serves or refuses it.
- Any failure to forward (owner unreachable, timeout) falls back to the local answer
  ("bundle not served here", SERVICE_NOT_AVAILABLE), which producers retry on another queue.  A send
  whose forward timed out may have been stored: the client's retry is RocketMQ's usual
  at-least-once.

This module must never serve a request itself nor forward a request this broker's ACL refuses.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, cast

import trio

from ledger_backend.faults import warn_fault
from protocols.rocketmq.codec import (
    FrameReader,
    RemotingCommand,
    decode_command,
    encode_command,
    next_opaque,
)
from protocols.rocketmq.errors import MalformedFrameError, RocketMQError
from protocols.rocketmq.headers import ext_int
from protocols.rocketmq.request_codes import RequestCode

log = logging.getLogger("ledgerwire.rocketmq.forwarding")

FORWARDED_REMARK = "ledgerwire:forwarded"
OWNER_WAIT_S = 1.5
OWNER_POLL_S = 0.1
CONNECT_TIMEOUT_S = 2.0
FORWARD_TIMEOUT_S = 10.0
RECEIVE_BYTES = 64 * 1024

FORWARDED_CODES = frozenset({
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.PULL_MESSAGE, RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
    RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
    RequestCode.GET_EARLIEST_MSG_STORETIME, RequestCode.CONSUMER_SEND_MSG_BACK,
})


class PeerGone(Exception):
    """The connection to the owner closed or failed before the answer came."""


class _Peer:
    """One connection to another broker's bundle port; answers matched by opaque."""

    def __init__(self, stream: trio.SocketStream, max_frame_bytes: int) -> None:
        self._stream = stream
        self._reader = FrameReader(max_frame_bytes)
        self._write_lock = trio.Lock()
        self._waiting: dict[int, tuple[trio.Event, list[RemotingCommand]]] = {}
        self.closed = False

    async def call(self, command: RemotingCommand, timeout_s: float) -> RemotingCommand:
        event, slot = trio.Event(), cast(list[RemotingCommand], [])
        self._waiting[command.opaque] = (event, slot)
        try:
            with trio.fail_after(timeout_s):
                async with self._write_lock:
                    await self._stream.send_all(encode_command(command))
                await event.wait()
        finally:
            self._waiting.pop(command.opaque, None)
        if not slot:
            raise PeerGone("connection closed before the answer")
        return slot[0]

    async def read_loop(self) -> None:
        try:
            while True:
                data = await self._stream.receive_some(RECEIVE_BYTES)
                if not data:
                    return
                for frame in self._reader.feed(data):
                    answer = decode_command(frame)
                    waiter = self._waiting.get(answer.opaque)
                    if answer.is_response and waiter is not None:
                        waiter[1].append(answer)
                        waiter[0].set()
        except (trio.BrokenResourceError, trio.ClosedResourceError, MalformedFrameError,
                OSError) as exc:
            log.info("forwarding connection ended: %r", exc)
        finally:
            self.closed = True
            for event, _slot in self._waiting.values():
                event.set()  # an empty slot: PeerGone
            with trio.CancelScope(shield=True):
                await self._stream.aclose()


class RequestForwarder:
    """Peer connections of one cluster broker (`run` owns their reader tasks)."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._peers: dict[str, _Peer] = {}
        self._connecting: dict[str, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def _peer(self, address: str) -> _Peer:
        peer = self._peers.get(address)
        if peer is not None and not peer.closed:
            return peer
        if self._nursery is None:
            raise PeerGone("forwarding is not running")
        async with self._connecting.setdefault(address, trio.Lock()):
            peer = self._peers.get(address)
            if peer is not None and not peer.closed:
                return peer
            host, port = address.rsplit(":", 1)
            with trio.fail_after(CONNECT_TIMEOUT_S):
                stream = await trio.open_tcp_stream(host, int(port))
            peer = _Peer(stream, self._max_frame_bytes)
            self._peers[address] = peer
            self._nursery.start_soon(peer.read_loop)
            return peer

    async def forward(self, address: str, request: RemotingCommand) -> RemotingCommand | None:
        """The owner's answer to `request` (under the client's opaque); None if it failed."""
        timeout_s = FORWARD_TIMEOUT_S
        if request.code == RequestCode.PULL_MESSAGE:  # a long poll is held that long
            try:
                timeout_s += ext_int(request.ext_fields, "suspendTimeoutMillis", 0) / 1000
            except RocketMQError:
                pass
        relayed = dataclasses.replace(request, opaque=next_opaque(), remark=FORWARDED_REMARK)
        try:
            peer = await self._peer(address)
            answer = await peer.call(relayed, timeout_s)
        except (OSError, trio.TooSlowError, trio.BrokenResourceError,
                trio.ClosedResourceError, PeerGone) as exc:
            # an owner that just died is still named until its session expires: one line
            # per owner every few seconds, not one per request
            warn_fault(log, f"forward:{address}", "forwarding request %d to %s failed: %r",
                       request.code, address, exc)
            return None
        return dataclasses.replace(answer, opaque=request.opaque,
                                   serialize_type=request.serialize_type)


LOCAL = "local"


async def wait_for_owner(bundle: int, is_local: Callable[[int], bool],
                         address_of: Callable[[int], str | None], own_address: str,
                         changed: Callable[[], trio.Event],
                         wait_s: float = OWNER_WAIT_S) -> str | None:
    """LOCAL once `bundle` is served here, the owner's address once another broker owns it,
    None if neither within `wait_s` (each ownership round wakes the wait)."""
    with trio.move_on_after(wait_s):
        while True:
            event = changed()
            if is_local(bundle):
                return LOCAL
            address = address_of(bundle)
            if address is not None and address != own_address:
                return address
            with trio.move_on_after(OWNER_POLL_S):  # a bundle gets ready before its round ends
                await event.wait()
    return LOCAL if is_local(bundle) else None


class BundleRequestRouter:
    """For one bundle's port: forward a per-queue request the bundle's owner must serve."""

    def __init__(self, bundle: int, forwarder: RequestForwarder,
                 is_local: Callable[[int], bool], address_of: Callable[[int], str | None],
                 own_address: str, changed: Callable[[], trio.Event],
                 acl: Any = None, broker: Any = None) -> None:
        self._bundle = bundle
        self._forwarder = forwarder
        self._is_local = is_local
        self._address_of = address_of
        self._own_address = own_address
        self._changed = changed
        self._acl = acl
        self._broker = broker

    async def route(self, conn: Any, request: RemotingCommand) -> RemotingCommand | None:
        """The owner's answer, or None: serve the request here (the local handlers refuse it
        if the bundle is still not served here)."""
        if request.code not in FORWARDED_CODES or self._is_local(self._bundle):
            return None
        if self._acl is not None:
            try:
                self._acl.check(conn, request, self._broker)
            except RocketMQError:
                return None  # dispatch answers the refusal
        where = await wait_for_owner(self._bundle, self._is_local, self._address_of,
                                     self._own_address, self._changed)
        if where is None or where == LOCAL or request.remark == FORWARDED_REMARK:
            return None
        return await self._forwarder.forward(where, request)
