"""One partition's replication to one remote cluster: a cursor on the local log and a producer.

The exactly-once argument, in the order things happen:

1. A session starts by claiming the checkpoint (gateway/replication/checkpoints.py) and taking a
   fresh idempotent producer id from the remote.
2. It reconciles: the checkpoint's (source_next, remote_next) pair was acknowledged, so the
   remote holds everything below source_next; anything sent after that checkpoint landed at
   remote_next or later.  The session fetches the remote partition from remote_next to its end
   and finds the last record stamped with this cluster's name: its `lw.origin.offset` + 1 is
   where reading resumes if that is past source_next.  So a crash after the remote acknowledged
   but before the checkpoint was written duplicates nothing, and a crash before the remote
   acknowledged loses nothing (the data is read again).
3. It reads committed data from source_next (below the last stable offset, aborted transactions
   and control batches dropped, records that came from another cluster kept out), sends it in
   order, one batch in flight, and advances only after the remote acknowledged.
4. Every `checkpoint_interval_s` it writes (source_next, remote_next) by compare-and-set.

Any doubt (a timeout, an error answer, a connection lost) ends the session; the next one starts
at step 1.  A remote that stays down only grows the backlog.  What is left: a produce that the
remote still applies after this side gave up on it (past the request timeout, before the next
session's reconcile) would be duplicated; the reconcile happens after a back-off to make that
unlikely, not impossible.

This module must never advance the durable position past what the remote acknowledged.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import trio

from gateway.replication.batches import (
    committed_slice,
    encode_batch,
    last_origin_offset,
    outgoing_batches,
    whole_batches,
)
from gateway.replication.checkpoints import Checkpoint, CheckpointLost, CheckpointStore
from gateway.replication.remote import RemoteError, RemoteKafka
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.record_batch import MAX_SEQUENCE, parse_header

log = logging.getLogger("ledgerwire.replication")

READ_BYTES = 4 << 20
SEND_BATCH_BYTES = 1 << 20
SCAN_BYTES = 4 << 20


@dataclass
class ReplicatorStatus:
    """What GET /admin/v1/replication and the metrics show for one partition and remote."""

    remote: str
    topic: str
    partition: int
    state: str = "starting"  # starting | replicating | idle | error | stopped
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


class PartitionReplicator:
    """Replicates local `topic`-`partition` to one remote cluster until cancelled."""

    def __init__(self, topics: Any, remote: RemoteKafka, checkpoints: CheckpointStore,
                 local_cluster: str, topic: str, partition: int, *,
                 checkpoint_interval_s: float = 1.0, retry_backoff_s: float = 1.0) -> None:
        self.topics = topics
        self.remote = remote
        self.checkpoints = checkpoints
        self.local_cluster = local_cluster
        self.topic = topic
        self.partition = partition
        self.checkpoint_interval_s = checkpoint_interval_s
        self.retry_backoff_s = retry_backoff_s
        self.status = ReplicatorStatus(remote.cluster.name, topic, partition)
        self.checkpoint = Checkpoint()

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                await self._session()
            except CheckpointLost as exc:
                self.status.state, self.status.last_error = "stopped", str(exc)
                log.warning("replication of %s-%d to %s stopped: %s", self.topic,
                            self.partition, self.remote.cluster.name, exc)
                return
            except (RemoteError, KafkaProtocolError, OSError, ValueError) as exc:
                failures += 1
                self.status.state, self.status.last_error = "error", str(exc)
                if failures == 1 or failures % 30 == 0:
                    log.warning("replication of %s-%d to %s: %s; retrying", self.topic,
                                self.partition, self.remote.cluster.name, exc)
            self._update_lag()
            await trio.sleep(self.retry_backoff_s)

    def _update_lag(self) -> None:
        oldest = self.status.oldest_unsent_ms
        self.status.lag_seconds = 0.0 if oldest is None else max(
            0.0, time.time() - oldest / 1000.0)

    async def _session(self) -> None:
        self.status.state = "starting"
        local = await self.topics.partition(self.topic, self.partition)
        info = self.topics.topics().get(self.topic)
        if info is None:
            raise ValueError(f"topic {self.topic} is gone")
        count = await self.remote.ensure_topic(self.topic, info.partitions, dict(info.configs))
        if self.partition >= count:
            raise RemoteError(f"{self.topic} has {count} partitions there, {info.partitions} "
                              f"here (partition increases are not followed yet)")
        checkpoint = self.checkpoint = await self.checkpoints.claim()
        producer_id, epoch = await self.remote.init_producer_id()
        sequence = 0
        source_next, remote_next = await self._reconcile(checkpoint)
        self.status.source_next = source_next
        last_checkpoint = trio.current_time()
        while True:
            local = await self.topics.partition(self.topic, self.partition)
            stable = local.last_stable_offset
            if source_next < local.log_start_offset:
                log.warning("replication of %s-%d to %s: offsets %d..%d were deleted here "
                            "before they were sent", self.topic, self.partition,
                            self.remote.cluster.name, source_next, local.log_start_offset)
                source_next = local.log_start_offset
            self.status.backlog_messages = max(0, stable - source_next)
            if trio.current_time() - last_checkpoint >= self.checkpoint_interval_s:
                await self._save(checkpoint, source_next, remote_next)
                last_checkpoint = trio.current_time()
            if source_next >= stable:
                self.status.state, self.status.oldest_unsent_ms = "idle", None
                self._update_lag()
                await local.wait_for_data(source_next, self.checkpoint_interval_s,
                                          committed=True)
                continue
            self.status.state = "replicating"
            batches = await local.read(source_next, READ_BYTES)
            read = committed_slice(batches, source_next, stable,
                                   local.aborted_transactions(source_next, stable))
            if read.next_offset == source_next:  # the first batch reaches past the stable end
                await local.wait_for_data(stable, self.checkpoint_interval_s, committed=True)
                continue
            if read.records:
                self.status.oldest_unsent_ms = read.records[0].timestamp
                self._update_lag()
            for group in outgoing_batches(read.records, self.local_cluster,
                                          max_bytes=SEND_BATCH_BYTES):
                batch = encode_batch(group, producer_id, epoch, sequence)
                base = await self.remote.produce(self.topic, self.partition, batch)
                sequence = (sequence + len(group)) % (MAX_SEQUENCE + 1)
                remote_next = base + len(group)
                self.status.sent_total += len(group)
            for local_offset, origin, origin_offset in read.inbound:
                if origin == self.remote.cluster.name:
                    checkpoint.add_inbound(local_offset + 1, origin_offset + 1)
            source_next = read.next_offset
            self.status.source_next = source_next
            self.status.oldest_unsent_ms = None
            self.status.backlog_messages = max(0, stable - source_next)

    async def _save(self, checkpoint: Checkpoint, source_next: int, remote_next: int) -> None:
        if (checkpoint.source_next, checkpoint.remote_next) == (source_next, remote_next):
            return
        checkpoint.source_next, checkpoint.remote_next = source_next, remote_next
        checkpoint.add_sync(source_next, remote_next)
        await self.checkpoints.save(checkpoint)

    async def _reconcile(self, checkpoint: Checkpoint) -> tuple[int, int]:
        """(where to read here, where the remote's end was): see step 2 of the module doc."""
        offset = checkpoint.remote_next
        earliest = await self.remote.list_offset(self.topic, self.partition)
        if offset < earliest:
            offset = earliest
        source_next = checkpoint.source_next
        while True:
            try:
                blob, high_watermark = await self.remote.fetch(self.topic, self.partition,
                                                               offset, SCAN_BYTES)
            except RemoteError as exc:
                if exc.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise
                offset = await self.remote.list_offset(self.topic, self.partition)
                continue
            found = last_origin_offset(blob, self.local_cluster)
            if found is not None:
                source_next = max(source_next, found[1] + 1)
            batches = whole_batches(blob)
            if not batches:
                if offset < high_watermark:
                    raise RemoteError(f"fetch of {self.topic}-{self.partition} at {offset} "
                                      f"returned no whole batch below {high_watermark}")
                return source_next, max(offset, high_watermark)
            offset = parse_header(batches[-1]).last_offset + 1
