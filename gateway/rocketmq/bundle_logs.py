"""Opening a queue's partition log for a RocketMQ bundle broker (gateway/rocketmq/bundle_broker.py)
the way the Kafka path does (protocols/kafka/handlers/topic_lookup.py open_partition): the
bundle's ownership is checked before the open and again after it, and the log returned
acknowledges an append only if this broker still owns the bundle when the append is durable.

A bundle released while its log was opening leaves this broker with a log it must not keep
(opening fenced the new owner's ledger, and the release already closed what it found), so the
log is closed quietly, as BundleHooks._open_quietly does, and the request is answered "bundle
not served here" (SERVICE_NOT_AVAILABLE: BundleNotServedError says why that code).  An append that
outlived the ownership may still be in the ledger (the new owner recovered it): it is simply
not acknowledged, and the producer's retry goes to the new owner.

This module must never hand out a log of a bundle this broker does not own, nor acknowledge an
append made after the bundle was released.

Why the append that outlived the bundle is refused although it is durable (session 15's
review; the refusal makes the RocketMQ client resend it, a duplicate in a failover).  The case
for acknowledging it instead, step by step, as far as the code shows it:

1. The append's completion comes only after its entry and every earlier one were acknowledged
   by the ack quorum's journals after their fdatasync (the write handle's LAC order; audit15's
   tests watch the fdatasync).
2. Its ledger is in the managed ledger's list: a rollover CAS-appends the new ledger before
   anything is sent to it, and an owner's open lists its ledger before the first append
   (ledger_backend/managed_ledger/factory.py).
3. The next owner gets it either from a graceful release, where the close waits for in-flight
   adds and closes the ledger at the LAC, which covers every completed add (an add still
   pending at the close's deadline is failed, never completed), or from fencing, where the
   recovery of every unclosed listed ledger keeps each entry an ack quorum acknowledged, and a
   list changed between its read and its CAS fails the open, which reads again.

So by the code the entry is in what the next owner serves.  It is still not acknowledged here
because nothing yet checks that end to end: no test releases a bundle of a real cluster while
an append is in flight, lets the append complete after the release, and reads the message back
from the new owner; and no chaos run has been made with acknowledging.  A wrong step above would
turn a duplicate into an acknowledged message lost, which is the worse fault.  Flip the rule
(here and in OwnedPartitionLog, where Kafka's non-idempotent producers resend the same way)
only with that test and a clean chaos run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from protocols.rocketmq.errors import ResponseCode, RocketMQError

log = logging.getLogger("ledgerwire.rocketmq.cluster")


class BundleNotServedError(RocketMQError):
    """A per-queue request reached a port whose bundle this broker does not own (now).

    A background service of the bundle (delays, transactions) meets it while the bundle is
    released, until the release cancels it: `released_here` makes ledger_backend.faults'
    log_failure note it at DEBUG, with no traceback and no WARNING.

    Answered SERVICE_NOT_AVAILABLE, one of the six codes on which the Java 4.x producer resends
    a synchronous send (DefaultMQProducer's retryResponseCodes: TOPIC_NOT_EXIST,
    SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, NO_PERMISSION, NO_BUYER_ID, NOT_IN_CURRENT_UNIT), to a
    queue of another broker name, i.e. another bundle; any other code (SYSTEM_BUSY included)
    fails the send at once.  The C++ 2.x producer resends on any failure.  Apache answers a
    broker that cannot store now the same way.  No code makes a 4.x client refresh its routes
    (a 30 s timer does); RocketMQ 5 (gateway/rocketmq/cluster_grpc.py not_served) is
    answered its own way, and this code maps to TOO_MANY_REQUESTS there as SYSTEM_BUSY did."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE
    released_here = True


class BundleOwnedLog:
    """A partition log of one bundle that acknowledges an append only while the bundle is
    still owned here; everything else is the log's own."""

    def __init__(self, inner: Any, owned: Callable[[], bool], what: str) -> None:
        self._inner = inner
        self._owned = owned
        self._what = what

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        return self._acknowledged(await self._inner.append(*args, **kwargs))

    async def append_built(self, batch: Any) -> Any:
        return self._acknowledged(await self._inner.append_built(batch))

    def append_built_soon(self, batch: Any, on_done: Callable[[Any], None]) -> bool:
        """The log's append_built_soon, its result checked as append_built's is (without this
        method `__getattr__` would hand it over unchecked); False when the log has none."""
        soon = getattr(self._inner, "append_built_soon", None)
        if soon is None:
            return False

        def checked(result: Any) -> None:
            if not isinstance(result, BaseException):
                try:
                    result = self._acknowledged(result)
                except BundleNotServedError as exc:
                    result = exc
            on_done(result)

        started: bool = soon(batch, checked)
        return started

    def _acknowledged(self, result: Any) -> Any:
        if not self._owned():
            raise BundleNotServedError(f"{self._what} was released while the message was "
                                       "stored; not acknowledged here, refresh the topic route")
        return result


async def open_bundle_log(topics: Any, owned: Callable[[], bool], what: str, topic: str,
                          partition: int) -> BundleOwnedLog:
    """`topics.partition(topic, partition)` of a bundle that `owned()` says is served here,
    checked before and after the open (`what` names the bundle in the refusal)."""
    if not owned():
        raise BundleNotServedError(f"{what} not served here; refresh the topic route")
    plog = await topics.partition(topic, partition)
    if not owned():  # released while it opened: do not keep the log of another's bundle
        try:
            await plog.close()
        except Exception as exc:  # fenced already: the new owner has it
            log.info("closing %s-%d: %r", topic, partition, exc)
        raise BundleNotServedError(f"{what} was released while its queue opened; refresh the "
                                   "topic route")
    return BundleOwnedLog(plog, owned, what)
