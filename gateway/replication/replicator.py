"""One partition's replication to one remote cluster: a cursor on the local log and a producer.

The exactly-once argument, in the order things happen:

1. A session starts by claiming the checkpoint (gateway/replication/checkpoints.py).  The
   idempotent producer id and epoch it writes to the remote with are the checkpoint's, taken
   from the remote once and kept; the sequence numbers count the records sent, so a record has
   the same sequence number in every session (the checkpoint pairs source_next with it).
2. It reconciles: the checkpoint's (source_next, remote_next) pair was acknowledged, so the
   remote holds everything below source_next; anything sent after that checkpoint landed at
   remote_next or later.  The session fetches the remote partition from remote_next to its end
   and finds the last record stamped with this cluster's name: its `lw.origin.offset` + 1 is
   where reading resumes if that is past source_next, and its sequence number + 1 the next
   one's.  So a crash after the remote acknowledged
   but before the checkpoint was written duplicates nothing, and a crash before the remote
   acknowledged loses nothing (the data is read again).  A checkpoint stored `settled` (written
   while the sender was held back with nothing in flight, unsettled before the next send) has
   nothing in doubt: then this scan is skipped, as it is when the checkpoint has no producer
   id yet (one is stored before anything is sent with it).
3. It reads committed data from source_next (below the last stable offset, aborted transactions
   and control batches dropped, records that came from another cluster kept out) and sends it
   in order on one connection, up to `MAX_IN_FLIGHT` batches (and `MAX_IN_FLIGHT_BYTES`)
   unanswered (remote.py's produce pipeline; the next ones are framed meanwhile).  The
   answers are taken in request order, and the position advances past a batch only when its
   answer, and so every earlier one, said acknowledged.
4. Every `checkpoint_interval_s` it writes the last acknowledged (source_next, remote_next) by
   compare-and-set; batches still in flight are never part of it.  A task of its own writes
   it, so neither sending nor taking answers waits for the metadata store (a write took
   45-460 ms at load ~9, once a second per partition); only a write that settles the
   checkpoint, after half an interval with nothing to send, holds the sender back.  A failed
   answer anywhere in the pipeline ends the session: the ones behind it are in doubt, and
   step 2 of the next session finds which of them landed.

Any doubt (a timeout, an error answer, a connection lost) ends the session; the next one starts
at step 1.  A remote that stays down only grows the backlog.  A produce that the remote still
applies after this side gave up on it is not a duplicate: if it lands before the next
session's first batch, that batch repeats its sequence numbers and is refused (out of order,
which ends the session, whose successor's scan finds it) or taken as its retry; if it lands
later, it is the one out of order.  Only a remote that forgot the producer (its state expired)
or answers out of order three sessions running (its tail was not where the scan looked) gets a
fresh producer id, and with it the old window.

This module must never advance the durable position past what the remote acknowledged.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from gateway.replication.batches import (
    committed_batches,
    last_origin_record,
    record_origins,
    whole_batches,
)
from gateway.replication.checkpoints import Checkpoint, CheckpointLost, CheckpointStore
from gateway.replication.record_rewrite import OutgoingBatches, frame
from gateway.replication.remote import (
    LATEST,
    MAX_IN_FLIGHT,
    InFlightWindow,
    ProducePipeline,
    RemoteError,
    RemoteKafka,
)
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.record_batch import MAX_SEQUENCE, parse_header

log = logging.getLogger("ledgerwire.replication")

READ_BYTES = 4 << 20
SEND_BATCH_BYTES = 1000 * 1000  # under Kafka's default max.message.bytes (1048588) with headers
SCAN_BYTES = 4 << 20
FRAMED_AHEAD = 2  # framed batches waiting for a place in the pipeline
FIRST_RETRY_S = 0.05  # the first retry after a session that sent something; doubling from there


@dataclass(frozen=True)
class _Outgoing:
    """One step for the sender: a batch to send (or None: only the position moves), and what
    becomes true once it is acknowledged."""

    batch: bytes | None
    records: int
    next_offset: int | None  # the local position once this is acknowledged
    inbound: list[tuple[int, str, int]]
    stable: int  # the local last stable offset when it was read (for the backlog)
    first_timestamp: int | None
    sequence: int  # the sequence number of the record at next_offset (when that is not None)


@dataclass
class _Acknowledged:
    """The acknowledger's latest answered position, for the checkpoint writer."""

    source_next: int
    remote_next: int
    sequence: int
    idle_since: float | None = None  # trio time the reader was at the stable end, all answered
    changed: trio.Event = field(default_factory=trio.Event)


@dataclass
class ReplicatorStatus:
    """What GET /admin/v1/replication and the metrics show for one partition and remote."""

    remote: str
    topic: str
    partition: int
    state: str = "starting"  # starting | replicating | idle | error | stopped | paused
    source_next: int = 0
    backlog_messages: int = 0
    lag_seconds: float = 0.0
    sent_total: int = 0
    last_error: str = ""
    oldest_unsent_ms: int | None = None  # timestamp of the first record not yet acknowledged

    def to_json(self) -> dict[str, Any]:
        return {"remote": self.remote, "topic": self.topic, "partition": self.partition,
                "state": self.state, "position": self.source_next,
                "backlog_messages": self.backlog_messages,
                "lag_seconds": round(self.lag_seconds, 3), "sent_total": self.sent_total,
                "last_error": self.last_error}


_RETRIABLE = (RemoteError, KafkaProtocolError, OSError, ValueError)


def _settled(group: BaseExceptionGroup) -> BaseException:  # type: ignore[type-arg]
    """The error a session's nursery ended with: a lost checkpoint if any task saw one, else the
    first error when every one is retriable (the transmitter and the acknowledger may both see
    one broken connection), else the group itself (a bug: shown, never retried)."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        error = pending.pop(0)
        if isinstance(error, BaseExceptionGroup):
            pending[:0] = list(error.exceptions)
        else:
            leaves.append(error)
    lost = [e for e in leaves if isinstance(e, CheckpointLost)]
    if lost:
        return lost[0]
    if leaves and all(isinstance(e, _RETRIABLE) for e in leaves):
        return leaves[0]
    return group if len(leaves) != 1 else leaves[0]


class PartitionReplicator:
    """Replicates local `topic`-`partition` to one remote cluster until cancelled."""

    def __init__(self, topics: Any, remote: RemoteKafka, checkpoints: CheckpointStore,
                 local_cluster: str, topic: str, partition: int, *,
                 checkpoint_interval_s: float = 1.0, retry_backoff_s: float = 1.0,
                 forward_min_bytes: int | None = None) -> None:
        self.topics = topics
        self.remote = remote
        self.checkpoints = checkpoints
        self.local_cluster = local_cluster
        self.topic = topic
        self.partition = partition
        self.checkpoint_interval_s = checkpoint_interval_s
        self.retry_backoff_s = retry_backoff_s
        self.forward_min_bytes = forward_min_bytes  # None: record_rewrite's default
        self.status = ReplicatorStatus(remote.cluster.name, topic, partition)
        self.checkpoint = Checkpoint()
        self._out_of_order = 0  # sessions running that ended in an out-of-order answer

    async def run(self) -> None:
        failures = 0
        backoff = FIRST_RETRY_S
        while True:
            sent = self.status.sent_total
            try:
                try:
                    await self._session()
                except BaseExceptionGroup as group:  # the session's nursery
                    raise _settled(group) from None
            except CheckpointLost as exc:
                self.status.state, self.status.last_error = "stopped", str(exc)
                log.warning("replication of %s-%d to %s stopped: %s", self.topic,
                            self.partition, self.remote.cluster.name, exc)
                return
            except _RETRIABLE as exc:
                failures += 1
                sequence_refused = isinstance(exc, RemoteError) and exc.code in (
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID)
                self._out_of_order = self._out_of_order + 1 if sequence_refused else 0
                self.status.state, self.status.last_error = "error", str(exc)
                if failures == 1 or failures % 30 == 0:
                    log.warning("replication of %s-%d to %s: %s; retrying", self.topic,
                                self.partition, self.remote.cluster.name, exc)
            self.refresh_backlog()
            self._update_lag()
            # a remote that just came back is tried again soon; one that stays away, every
            # retry_backoff_s, or as soon as it takes connections again
            backoff = FIRST_RETRY_S if self.status.sent_total > sent else backoff * 2
            await self.remote.pause_after_failure(min(self.retry_backoff_s, backoff))

    def refresh_backlog(self) -> None:
        """While the remote is away (or replication is paused) nothing is sent: count the
        backlog from the log."""
        local = self.topics.open_partitions().get((self.topic, self.partition))
        if local is not None:
            self.status.backlog_messages = max(
                0, local.last_stable_offset - self.status.source_next)

    def _update_lag(self) -> None:
        oldest = self.status.oldest_unsent_ms
        self.status.lag_seconds = 0.0 if oldest is None else max(
            0.0, time.time() - oldest / 1000.0)

    async def _session(self) -> None:
        self.status.state = "starting"
        await self.topics.partition(self.topic, self.partition)
        info = self.topics.topics().get(self.topic)
        if info is None:
            raise ValueError(f"topic {self.topic} is gone")
        count = await self.remote.ensure_topic(self.topic, info.partitions, dict(info.configs))
        if self.partition >= count:
            raise RemoteError(f"{self.topic} has {count} partitions there, {info.partitions} "
                              f"here, and adding partitions there did not take")
        checkpoint = self.checkpoint = await self.checkpoints.claim(str(info.topic_id))
        sequence: int | None
        if checkpoint.settled or checkpoint.producer is None:
            # nothing can be in doubt (a producer id is stored before its first send): no scan
            # of the remote's tail, which after an outage is all the remote's writers wrote
            source_next, remote_next = checkpoint.source_next, checkpoint.remote_next
            sequence = checkpoint.sequence
            checkpoint.settled = False  # as the claim stored it
            if remote_next < 0:  # nothing sent yet: what is sent lands after the remote's end
                remote_next = await self.remote.list_offset(self.topic, self.partition, LATEST)
                if remote_next > 0:  # records there that are not ours
                    checkpoint.note_foreign(0)
        else:
            source_next, remote_next, sequence = await self._reconcile(checkpoint)
            if source_next > checkpoint.source_next:  # passed what a predecessor sent,
                # whose inbound pairs there were never stored
                checkpoint.unnoted = max(checkpoint.unnoted, source_next)
        if checkpoint.producer is None or sequence is None or self._out_of_order >= 3:
            # none yet, the remote's tail written under another one, or refused repeatedly
            if checkpoint.producer is not None:
                log.warning("replication of %s-%d to %s: a new producer id", self.topic,
                            self.partition, self.remote.cluster.name)
            checkpoint.producer, sequence = await self.remote.init_producer_id(), 0
            self._out_of_order = 0
            checkpoint.source_next, checkpoint.remote_next = source_next, remote_next
            checkpoint.sequence = sequence
            await self.checkpoints.save(checkpoint)  # before anything is sent with it
        producer_id, epoch = checkpoint.producer
        self.status.source_next = source_next
        # The reader frames batches; the transmitter keeps up to MAX_IN_FLIGHT of them (and
        # MAX_IN_FLIGHT_BYTES) at the remote; the acknowledger takes the answers in order and
        # alone moves the position.
        framed, to_transmit = trio.open_memory_channel[_Outgoing](FRAMED_AHEAD)
        sent, to_acknowledge = trio.open_memory_channel[_Outgoing](MAX_IN_FLIGHT * 4)
        pipeline = await self.remote.open_pipeline(self.topic, self.partition)
        gate = trio.Lock()  # held to send, and to write a checkpoint that is or was settled
        saving = trio.Lock()  # held by every checkpoint write (after the gate, if both)
        acknowledged = _Acknowledged(source_next, remote_next, sequence)
        try:
            async with trio.open_nursery() as nursery:
                slots = InFlightWindow()
                nursery.start_soon(self._read, source_next, producer_id, epoch, sequence,
                                   framed)
                nursery.start_soon(self._transmit, to_transmit, pipeline, slots, gate, saving,
                                   checkpoint, sent)
                nursery.start_soon(self._write_checkpoints, acknowledged, pipeline, gate,
                                   saving, checkpoint)
                await self._acknowledge(to_acknowledge, pipeline, slots, checkpoint,
                                        acknowledged)
        finally:
            with trio.CancelScope(shield=True):
                await pipeline.aclose()

    async def _read(self, source_next: int, producer_id: int, epoch: int, sequence: int,
                    send: trio.MemorySendChannel[_Outgoing]) -> None:
        """Read committed data from `source_next` on (whose record has sequence number
        `sequence`) and hand framed batches on in order."""
        while True:
            local = await self.topics.partition(self.topic, self.partition)
            stable = local.last_stable_offset
            if source_next < local.log_start_offset:
                log.warning("replication of %s-%d to %s: offsets %d..%d were deleted here "
                            "before they were sent", self.topic, self.partition,
                            self.remote.cluster.name, source_next, local.log_start_offset)
                source_next = local.log_start_offset
            if source_next >= stable:
                await send.send(_Outgoing(None, 0, source_next, [], stable, None, sequence))
                await local.wait_for_data(source_next, self.checkpoint_interval_s,
                                          committed=True)
                continue
            batches = await local.read(source_next, READ_BYTES)
            kept, next_offset = committed_batches(
                batches, stable, local.aborted_transactions(source_next, stable))
            if next_offset is None:  # the first batch reaches past the stable end
                await local.wait_for_data(stable, self.checkpoint_interval_s,
                                          committed=True)
                continue
            out = OutgoingBatches(self.local_cluster, SEND_BATCH_BYTES,
                                  forward_min_bytes=self.forward_min_bytes)
            for data in kept:
                out.add(data, source_next)
            groups = out.finish()
            for i, (payload, n, base_ts, max_ts, _last) in enumerate(groups):
                batch = frame(payload, n, base_ts, max_ts, producer_id, epoch, sequence)
                sequence = (sequence + n) % (MAX_SEQUENCE + 1)
                last = i == len(groups) - 1
                await send.send(_Outgoing(batch, n, next_offset if last else None,
                                          out.inbound if last else [], stable, base_ts,
                                          sequence))
            if not groups:
                await send.send(_Outgoing(None, 0, next_offset, out.inbound, stable, None,
                                          sequence))
            source_next = next_offset

    async def _transmit(self, framed: trio.MemoryReceiveChannel[_Outgoing],
                        pipeline: ProducePipeline, slots: InFlightWindow, gate: trio.Lock,
                        saving: trio.Lock, checkpoint: Checkpoint,
                        sent: trio.MemorySendChannel[_Outgoing]) -> None:
        """Send each framed batch as soon as the pipeline has room, and hand every item, sent
        or not, to the acknowledger in order.  A settled checkpoint is unsettled first."""
        async for item in framed:
            if item.batch is not None:
                await slots.reserve(len(item.batch))
                async with gate:
                    if checkpoint.settled:
                        async with saving:
                            checkpoint.settled = False
                            await self.checkpoints.save(checkpoint)
                    await pipeline.send(item.batch)
            await sent.send(item)

    async def _acknowledge(self, sent: trio.MemoryReceiveChannel[_Outgoing],
                           pipeline: ProducePipeline, slots: InFlightWindow,
                           checkpoint: Checkpoint, acknowledged: _Acknowledged) -> None:
        """Take the answers in order; the position moves only here (see the module doc), and
        only at the end of a read: a pair (source_next, remote_next) never has records of a
        read's first batches at the remote below remote_next but here at source_next or past
        it (a read framed into several batches)."""
        remote_end = acknowledged.remote_next
        async for item in sent:
            if item.batch is not None:
                self.status.state = "replicating"
                self.status.oldest_unsent_ms = item.first_timestamp
                self._update_lag()
                base = await pipeline.receive()
                slots.release(len(item.batch))
                if base > remote_end >= 0:  # the remote's own (or a third's) records between
                    checkpoint.note_foreign(remote_end)
                remote_end = base + item.records
                acknowledged.idle_since = None
                self.status.sent_total += item.records
            for local_offset, origin, origin_offset in item.inbound:
                if origin == self.remote.cluster.name:
                    checkpoint.add_inbound(local_offset + 1, origin_offset + 1)
            if item.next_offset is not None:
                acknowledged.source_next, acknowledged.sequence = item.next_offset, item.sequence
                acknowledged.remote_next = remote_end
                self.status.source_next = item.next_offset
                self.status.oldest_unsent_ms = None
            self.status.backlog_messages = max(0, item.stable - acknowledged.source_next)
            if item.batch is None and acknowledged.source_next >= item.stable:
                self.status.state = "idle"
                self._update_lag()
                if acknowledged.idle_since is None:
                    acknowledged.idle_since = trio.current_time()
            elif item.batch is None:
                acknowledged.idle_since = None
            acknowledged.changed.set()

    async def _write_checkpoints(self, acknowledged: _Acknowledged, pipeline: ProducePipeline,
                                 gate: trio.Lock, saving: trio.Lock,
                                 checkpoint: Checkpoint) -> None:
        """Write the acknowledged position at most every `checkpoint_interval_s`, beside the
        sending.  Settled only after half an interval at the stable end with nothing in flight
        (the gate held: the sender waits), so a steady stream never waits for a write."""
        written = trio.current_time()
        while True:
            await acknowledged.changed.wait()
            acknowledged.changed = trio.Event()
            await trio.sleep_until(written + self.checkpoint_interval_s)
            written = trio.current_time()
            idle = acknowledged.idle_since
            if (idle is not None and written - idle >= self.checkpoint_interval_s / 2) or (
                    checkpoint.settled):
                async with gate, saving:  # in_flight cannot grow meanwhile
                    settled = acknowledged.idle_since is not None and pipeline.in_flight == 0
                    await self._save(checkpoint, acknowledged, settled=settled)
            else:
                async with saving:  # stored unsettled, and stays so: the sender goes on
                    await self._save(checkpoint, acknowledged, settled=False)

    async def _save(self, checkpoint: Checkpoint, acknowledged: _Acknowledged, *,
                    settled: bool) -> None:
        source_next, remote_next = acknowledged.source_next, acknowledged.remote_next
        sequence = acknowledged.sequence
        if (checkpoint.source_next, checkpoint.remote_next, checkpoint.settled) == (
                source_next, remote_next, settled):
            return
        checkpoint.source_next, checkpoint.remote_next = source_next, remote_next
        checkpoint.sequence = sequence
        checkpoint.settled = settled
        checkpoint.add_sync(source_next, remote_next)
        await self.checkpoints.save(checkpoint)

    async def _reconcile(self, checkpoint: Checkpoint) -> tuple[int, int, int | None]:
        """(where to read here, where the remote's end was, the sequence number to go on with;
        None: the last record found there was not written with this checkpoint's producer):
        see step 2 of the module doc."""
        offset = checkpoint.remote_next
        earliest = await self.remote.list_offset(self.topic, self.partition)
        if offset < earliest:
            offset = earliest
        source_next = checkpoint.source_next
        sequence: int | None = checkpoint.sequence
        while True:
            try:
                blob, high_watermark = await self.remote.fetch(self.topic, self.partition,
                                                               offset, SCAN_BYTES)
            except RemoteError as exc:
                if exc.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise
                offset = await self.remote.list_offset(self.topic, self.partition)
                continue
            found = last_origin_record(blob, self.local_cluster)
            if found is not None and found.origin_offset + 1 >= source_next:
                source_next = found.origin_offset + 1
                sequence = ((found.sequence + 1) % (MAX_SEQUENCE + 1)
                            if checkpoint.producer == (found.producer_id, found.producer_epoch)
                            else None)
            batches = whole_batches(blob)
            for batch in batches if not 0 <= checkpoint.foreign_from <= offset else ():
                # the remote's own (or a third's) records past the position
                if any(o is None or o[0] != self.local_cluster for o in record_origins(batch)):
                    checkpoint.note_foreign(max(offset, parse_header(batch).base_offset))
                    break
            if not batches:
                if offset < high_watermark:
                    raise RemoteError(f"fetch of {self.topic}-{self.partition} at {offset} "
                                      f"returned no whole batch below {high_watermark}")
                return source_next, max(offset, high_watermark), sequence
            offset = parse_header(batches[-1]).last_offset + 1
