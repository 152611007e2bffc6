"""How a bookie answers one request: adds, reads, batch reads, long polls, LAC and info.

BookieAnswers turns a decoded request (bookie/protocol.py) into its response against a
BookieStorage. The wire server (bookie/server.py) calls it for every request of an
authenticated connection, and an in-process ledger client calls the same ``answer()`` through
local_bookies.py, so both see identical fencing, LAC and error statuses.

Adds and fencing reads of a ledger with a password must carry its master key (ledger_keys.py;
checked when the bookie has a metadata store). A batch read (READ_ENTRIES) is answered with at
most ``max_batch_entries`` entries and ``max_batch_bytes`` bytes whatever the request asks;
with ``max_batch_bytes`` 0 it is answered BAD_REQUEST. Storage errors become wire statuses in
one place (``_status_for``).

This module must never acknowledge an add before ``storage.add_entry`` returned (that is the
journal fsync), never touch a socket, and never close the storage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from ledger_backend.bookie.auth import refusal
from ledger_backend.bookie.ledger_keys import LedgerKeys
from ledger_backend.bookie.protocol import (
    AddEntryRequest,
    AddEntryResponse,
    AuthRequest,
    BookieInfoRequest,
    BookieInfoResponse,
    Message,
    ReadEntriesRequest,
    ReadEntriesResponse,
    ReadEntryRequest,
    ReadEntryResponse,
    ReadLacRequest,
    ReadLacResponse,
    Status,
    WriteLacRequest,
    WriteLacResponse,
)
from ledger_backend.bookie.storage_api import (
    BookieReadOnlyError,
    BookieStorage,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)

__all__ = ["MAX_BATCH_BYTES", "MAX_BATCH_ENTRIES", "BookieAnswers"]

logger = logging.getLogger("ledger_backend.bookie.server")  # the bookie server's log, as before

_MAX_LONG_POLL_S = 600.0
MAX_BATCH_ENTRIES = 1024  # default caps of one READ_ENTRIES answer
MAX_BATCH_BYTES = 8 << 20


class BookieAnswers:
    """The responses of one bookie to its requests, whoever carried them."""

    def __init__(
        self,
        storage: BookieStorage,
        bookie_id: str,
        *,
        max_batch_entries: int,
        max_batch_bytes: int,
        keys: LedgerKeys | None,
    ) -> None:
        self.storage = storage
        self.bookie_id = bookie_id
        self._keys = keys  # ledger master keys checked against metadata (ledger_keys.py)
        self._max_batch_entries = max(1, max_batch_entries)
        self._max_batch_bytes = max_batch_bytes  # 0: batch reads are not served
        self._draining = False
        self._long_polls: set[trio.CancelScope] = set()

    def end_long_polls(self) -> None:
        """The bookie is draining: pending long polls are answered now (TIMEOUT with the
        current LAC), and new ones at once."""
        self._draining = True
        for poll in list(self._long_polls):
            poll.cancel()

    async def answer(self, request: Message) -> Message:
        """The response to one request: what the wire gets, and what an in-process client
        (ledger_backend.bookie.local_bookies) gets without the wire."""
        if type(request) is AddEntryRequest:
            response: Message = await self._add_entry(request)
        elif type(request) is ReadEntryRequest:
            response = await self._read_entry(request)
        elif type(request) is ReadEntriesRequest:
            response = await self._read_entries(request)
        elif type(request) is ReadLacRequest:
            response = self._read_lac(request)
        elif type(request) is WriteLacRequest:
            response = self._write_lac(request)
        elif type(request) is BookieInfoRequest:
            response = self._bookie_info(request)
        elif type(request) is AuthRequest:  # not (or no longer) expected on this connection
            response = refusal(request, Status.BAD_REQUEST)
        else:  # FrameDecoder(accept="requests") lets nothing else through
            raise AssertionError(f"unexpected message {request!r}")
        return response

    def learn_key(self, ledger_id: int, password_hash: str) -> None:
        """A client of this process committed ledger_id's metadata with this hash (ledger_keys.py
        `remember`): its adds are checked against it without a metadata read."""
        if self._keys is not None:
            self._keys.remember(ledger_id, password_hash)

    def start_add(self, req: AddEntryRequest, respond: Callable[[AddEntryResponse], None]
                  ) -> bool:  # fmt: skip
        """Take an add without a task (an in-process client): when its ledger's key is known
        to match and the storage takes it at once, `respond` gets the OK (or the journal
        failure's status) in the Trio thread once the entry is fsynced, and True is returned.
        False, with nothing done: answer() it (a refusal, a key to read, a full write cache;
        the same checks then give the same status)."""
        start = getattr(self.storage, "start_add_entry", None)
        if start is None or req.ledger_id < 0 or req.entry_id < 0:
            return False
        if self._keys is not None:
            known, refused = self._keys.known_refusal(req.ledger_id, req.master_key)
            if not known or refused is not None:
                return False

        def journaled(error: BaseException | None) -> None:
            status = Status.OK
            if error is not None:
                status = self._status_for(error if isinstance(error, Exception)
                                          else RuntimeError(repr(error)),
                                          f"add {req.ledger_id}:{req.entry_id}")
            respond(AddEntryResponse(req.request_id, status, req.ledger_id, req.entry_id))

        taken: bool = start(req.ledger_id, req.entry_id, req.lac, req.body, journaled,
                            recovery_add=req.recovery)
        return taken

    async def _add_entry(self, req: AddEntryRequest) -> AddEntryResponse:
        refused = None
        if req.ledger_id >= 0 and self._keys is not None:
            refused = await self._keys.refusal(req.ledger_id, req.master_key)
        if req.ledger_id < 0 or req.entry_id < 0:
            status = Status.BAD_REQUEST
        elif refused is not None:
            status = refused
        else:
            try:
                await self.storage.add_entry(
                    req.ledger_id, req.entry_id, req.lac, req.body, recovery_add=req.recovery
                )
                status = Status.OK
            except Exception as exc:
                status = self._status_for(exc, f"add {req.ledger_id}:{req.entry_id}")
        return AddEntryResponse(req.request_id, status, req.ledger_id, req.entry_id)

    async def _read_entry(self, req: ReadEntryRequest) -> ReadEntryResponse:
        ledger_id, entry_id = req.ledger_id, req.entry_id
        long_poll = req.wait_for_lac_above >= 0
        if ledger_id < 0 or entry_id < -1 or (entry_id == -1 and not (req.fence or long_poll)):
            return ReadEntryResponse(req.request_id, Status.BAD_REQUEST, ledger_id, entry_id, -1)
        lac = -1
        if req.fence and self._keys is not None:
            refused = await self._keys.refusal(ledger_id, req.master_key)
            if refused is not None:
                return ReadEntryResponse(req.request_id, refused, ledger_id, entry_id,
                                         self._lac_or_none(ledger_id))  # fmt: skip
        try:
            if req.fence:  # recovery reads fence too (the fix for BookKeeper issue 2614)
                lac = await self.storage.fence(ledger_id)
            if long_poll:
                timeout_s = min(req.timeout_ms / 1000.0, _MAX_LONG_POLL_S)
                with trio.CancelScope() as poll_scope:  # drain() ends long polls early
                    self._long_polls.add(poll_scope)
                    if self._draining:
                        poll_scope.cancel()
                    try:
                        lac = await self.storage.wait_for_lac_update(
                            ledger_id, req.wait_for_lac_above, timeout_s
                        )
                    finally:
                        self._long_polls.discard(poll_scope)
                if poll_scope.cancelled_caught:
                    lac = self._lac_or_none(ledger_id)
                if lac <= req.wait_for_lac_above:
                    return ReadEntryResponse(
                        req.request_id, Status.TIMEOUT, ledger_id, entry_id, lac
                    )
            if entry_id == -1:
                return ReadEntryResponse(req.request_id, Status.OK, ledger_id, -1, lac)
            body = await self.storage.read_entry(ledger_id, entry_id)
            lac = self.storage.last_add_confirmed(ledger_id)
            return ReadEntryResponse(req.request_id, Status.OK, ledger_id, entry_id, lac, body)
        except Exception as exc:
            status = self._status_for(exc, f"read {ledger_id}:{entry_id}")
            lac = self._lac_or_none(ledger_id)
            return ReadEntryResponse(req.request_id, status, ledger_id, entry_id, lac)

    async def _read_entries(self, req: ReadEntriesRequest) -> ReadEntriesResponse:
        ledger_id, first = req.ledger_id, req.first_entry_id
        if ledger_id < 0 or first < 0 or req.max_entries < 1 or not self._max_batch_bytes:
            return ReadEntriesResponse(req.request_id, Status.BAD_REQUEST, ledger_id, first, -1)
        count = min(req.max_entries, self._max_batch_entries)
        budget = min(req.max_bytes, self._max_batch_bytes)
        try:
            read_batch = getattr(self.storage, "read_batch", None)
            if read_batch is not None:
                bodies = await read_batch(ledger_id, first, count, budget)
            else:
                bodies = await self._read_batch_entry_by_entry(ledger_id, first, count, budget)
            lac = self.storage.last_add_confirmed(ledger_id)
            return ReadEntriesResponse(req.request_id, Status.OK, ledger_id, first, lac,
                                       tuple(bodies))  # fmt: skip
        except Exception as exc:
            status = self._status_for(exc, f"batch read {ledger_id}:{first}")
            return ReadEntriesResponse(req.request_id, status, ledger_id, first,
                                       self._lac_or_none(ledger_id))  # fmt: skip

    async def _read_batch_entry_by_entry(self, ledger_id: int, first: int, count: int,
                                         budget: int) -> list[bytes]:  # fmt: skip
        """For an engine without read_batch: the first entry (its error raised), then the
        following ones until one fails or the next would pass the byte budget."""
        bodies = [await self.storage.read_entry(ledger_id, first)]
        total = len(bodies[0])
        for entry_id in range(first + 1, first + count):
            try:
                body = await self.storage.read_entry(ledger_id, entry_id)
            except Exception:  # noqa: BLE001 - the batch ends here; the client asks again
                break
            if total + len(body) > budget:
                break
            bodies.append(body)
            total += len(body)
        return bodies

    def _read_lac(self, req: ReadLacRequest) -> ReadLacResponse:
        if req.ledger_id < 0:
            return ReadLacResponse(req.request_id, Status.BAD_REQUEST, req.ledger_id, -1)
        try:
            lac = self.storage.last_add_confirmed(req.ledger_id)
            return ReadLacResponse(req.request_id, Status.OK, req.ledger_id, lac)
        except Exception as exc:
            status = self._status_for(exc, f"read LAC of {req.ledger_id}")
            return ReadLacResponse(req.request_id, status, req.ledger_id, -1)

    def _write_lac(self, req: WriteLacRequest) -> WriteLacResponse:
        if req.ledger_id < 0 or req.lac < -1:
            return WriteLacResponse(req.request_id, Status.BAD_REQUEST, req.ledger_id)
        try:
            self.storage.set_explicit_lac(req.ledger_id, req.lac)
            return WriteLacResponse(req.request_id, Status.OK, req.ledger_id)
        except Exception as exc:
            status = self._status_for(exc, f"write LAC of {req.ledger_id}")
            return WriteLacResponse(req.request_id, status, req.ledger_id)

    def _bookie_info(self, req: BookieInfoRequest) -> BookieInfoResponse:
        try:
            used, total = self.storage.disk_usage()
            read_only = self.storage.is_read_only()
        except Exception as exc:
            status = self._status_for(exc, "bookie info")
            return BookieInfoResponse(req.request_id, status, 0, 0, False, self.bookie_id)
        free = max(0, total - used)
        return BookieInfoResponse(req.request_id, Status.OK, free, total, read_only, self.bookie_id)

    def _lac_or_none(self, ledger_id: int) -> int:
        try:
            return self.storage.last_add_confirmed(ledger_id)
        except Exception:
            return -1

    def _status_for(self, exc: Exception, what: str) -> Status:
        """The one place where storage errors become wire statuses."""
        if isinstance(exc, LedgerFencedError):
            return Status.FENCED
        if isinstance(exc, NoSuchLedgerError):
            return Status.NO_SUCH_LEDGER
        if isinstance(exc, NoSuchEntryError):
            return Status.NO_SUCH_ENTRY
        if isinstance(exc, BookieReadOnlyError):
            return Status.READ_ONLY
        logger.exception("bookie %s: %s failed", self.bookie_id, what, exc_info=exc)
        return Status.INTERNAL_ERROR
