"""ShareFetch (key 78) and ShareAcknowledge (key 79): records handed to share consumers one at
a time, through the per-record delivery engine.

A ShareFetch acts in the member's share session (protocols/kafka/share_sessions.py): it first
applies the acknowledgements piggybacked per partition (all or none per partition, reported in
AcknowledgeErrorCode), then acquires up to MaxRecords records over the session's partitions
(redeliveries first), reads the stored batches that hold them and returns those batches as they
are, with AcquiredRecords naming the offsets this member now holds and their delivery counts;
the client delivers only those.  With nothing to acquire it waits up to MaxWaitMs, woken by new
data or by records coming back (released, lock expired).  Epoch -1 closes the session after the
acknowledgements and releases what the member still holds.

share.isolation.level=read_committed: nothing at or past the last stable offset is acquired, and
records of aborted transactions among the acquired ones are archived at once (Kafka's broker
does the same: the response carries no aborted-transaction list) and left out of
AcquiredRecords.  Control records stay in the acquired ranges; the client acknowledges them as
GAP.

With a dead-letter topic (share.dead.letter.topic) a record acquired past the group's delivery
count limit is not handed out: it is copied to that topic first (the broker's share groups do
it, durably) and then archived.  Acquired records that do not reach the member (their read, or
their dead-letter copy, failed) are given back at once with that delivery not counted
(gateway/delivery's `give_back`: Kafka acquires only what it has read), so another consumer
gets them (and a failed copy is tried again) without waiting for the lock to expire.

ACLs: READ on the group, READ on each topic.  This module must never reveal a record whose
acquisition is not durable (the delivery engine persists before it answers) and never decode
records.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

import trio

from protocols.kafka.acl_model import OP_READ, RES_TOPIC
from protocols.kafka.broker_api import PartitionLogApi, RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.handlers.authorization import group_denied_code
from protocols.kafka.handlers.error_responses import error_code_of
from protocols.kafka.handlers.share_groups import share_groups_of
from protocols.kafka.handlers.topic_lookup import open_partition
from protocols.kafka.record_batch import parse_header
from protocols.kafka.share_api import (
    EARLIEST,
    READ_COMMITTED,
    AcquiredView,
    ShareGroupsApi,
    by_duration_ms,
)
from protocols.kafka.share_sessions import CLOSE_EPOCH, OPEN_EPOCH, ShareSessionError

log = logging.getLogger("ledgerwire.kafka.share_fetch")

MAX_WAIT_CAP_S = 60.0
DEFAULT_MAX_RECORDS = 500
READ_CHUNK_BYTES = 1 << 20
ACK_GAP = 0


def _top_error(code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message,
            "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []}


class _Answers:
    """Per-partition answer dicts, in the order partitions first appear."""

    def __init__(self, leader_id: int) -> None:
        self.leader_id = leader_id
        self.by_key: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}

    def of(self, topic_id: uuid.UUID, partition: int) -> dict[str, Any]:
        answer = self.by_key.get((topic_id, partition))
        if answer is None:
            answer = self.by_key[(topic_id, partition)] = {
                "partition_index": partition, "error_code": 0, "error_message": None,
                "acknowledge_error_code": 0, "acknowledge_error_message": None,
                "current_leader": {"leader_id": self.leader_id, "leader_epoch": 0},
                "records": b"", "acquired_records": [],
            }
        return answer

    def responses(self, fetch: bool) -> list[dict[str, Any]]:
        by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for (topic_id, _), answer in self.by_key.items():
            if ErrorCode.NOT_LEADER_OR_FOLLOWER in (answer["error_code"],
                                                    answer["acknowledge_error_code"]):
                # not the leader: name none, so the client looks the leader up again
                answer["current_leader"] = {"leader_id": -1, "leader_epoch": -1}
            if not fetch:
                answer = {k: answer[k] for k in ("partition_index", "error_code",
                                                 "error_message", "current_leader")}
            by_topic.setdefault(topic_id, []).append(answer)
        return [{"topic_id": t, "partitions": parts} for t, parts in by_topic.items()]


def _ack_batches(wire: Sequence[dict]) -> list[tuple[int, int, tuple[int, ...]]]:
    return [(int(b["first_offset"]), int(b["last_offset"]),
             tuple(int(t) for t in b.get("acknowledge_types") or []))
            for b in wire]


async def _acknowledge_all(ctx: RequestContext, share: ShareGroupsApi, group_id: str,
                           member_id: str, body: dict, answers: _Answers,
                           names: dict[uuid.UUID, str], fetch: bool) -> None:
    ack_code = "acknowledge_error_code" if fetch else "error_code"
    ack_message = "acknowledge_error_message" if fetch else "error_message"
    for t in body.get("topics") or []:
        topic_id = t["topic_id"]
        for p in t.get("partitions") or []:
            batches = _ack_batches(p.get("acknowledgement_batches") or [])
            if not batches:
                continue
            answer = answers.of(topic_id, int(p["partition_index"]))
            name = names.get(topic_id)
            if name is None:
                answer[ack_code] = int(ErrorCode.UNKNOWN_TOPIC_ID)
            elif not ctx.authorize(OP_READ, RES_TOPIC, name):
                answer[ack_code] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            else:
                try:
                    code, message = await share.acknowledge(
                        group_id, name, int(p["partition_index"]), member_id, batches)
                except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
                    code, message = error_code_of(exc), str(exc) or None
                answer[ack_code], answer[ack_message] = int(code), message


def _begin_session(share: ShareGroupsApi, group_id: str, member_id: str, epoch: int,
                   has_acks: bool) -> Any:
    if not group_id:
        raise KafkaProtocolError("GroupId can't be empty.", code=ErrorCode.INVALID_GROUP_ID)
    if not member_id:
        raise KafkaProtocolError("MemberId can't be empty.", code=ErrorCode.INVALID_REQUEST)
    if epoch == OPEN_EPOCH and has_acks:
        raise KafkaProtocolError("acknowledgements need an open share session",
                                 code=ErrorCode.INVALID_REQUEST)
    return share.sessions.begin(group_id, member_id, epoch)


def _has_acks(body: dict) -> bool:
    return any(p.get("acknowledgement_batches")
               for t in body.get("topics") or [] for p in t.get("partitions") or [])


async def _read_ranges(plog: PartitionLogApi, ranges: Sequence[AcquiredView]) -> list[bytes]:
    """The stored batches holding the acquired offsets, each once, in offset order."""
    out: list[bytes] = []
    covered = -1  # the last offset of the last batch taken
    for r in ranges:
        offset = max(r.first, covered + 1)
        while offset <= r.last:
            batches = await plog.read(offset, READ_CHUNK_BYTES)
            advanced = False
            for batch in batches:
                header = parse_header(batch)
                if header.last_offset < offset:
                    continue
                if header.base_offset > r.last:
                    break
                out.append(batch)
                covered = header.last_offset
                offset = covered + 1
                advanced = True
                if offset > r.last:
                    break
            if not advanced:
                break
    return out


def _aborted_offsets(plog: PartitionLogApi, batches: list[bytes]) -> list[tuple[int, int]]:
    """(first, last) of the batches that belong to aborted transactions (the consumer's rule:
    a producer's transactional batches from an aborted transaction's first offset on, until that
    producer's next control batch)."""
    if not batches:
        return []
    headers = [parse_header(b) for b in batches]
    aborted = sorted(plog.aborted_transactions(headers[0].base_offset,
                                               headers[-1].last_offset + 1),
                     key=lambda a: a[1])
    if not aborted:
        return []
    out: list[tuple[int, int]] = []
    active: set[int] = set()
    pending = list(aborted)
    for h in headers:
        while pending and pending[0][1] <= h.last_offset:
            active.add(pending.pop(0)[0])
        if h.is_control:
            active.discard(h.producer_id)
        elif h.is_transactional and h.producer_id in active:
            out.append((h.base_offset, h.last_offset))
    return out


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """(first, last) of each run of consecutive offsets (sorted input)."""
    out: list[tuple[int, int]] = []
    for o in offsets:
        if out and out[-1][1] == o - 1:
            out[-1] = (out[-1][0], o)
        else:
            out.append((o, o))
    return out


def _minus(ranges: Sequence[AcquiredView], holes: list[tuple[int, int]]) -> list[dict]:
    """AcquiredRecords for `ranges` without the offsets in `holes`."""
    out = []
    for r in ranges:
        pieces = [(r.first, r.last)]
        for lo, hi in holes:
            pieces = [piece for a, b in pieces
                      for piece in ((a, min(b, lo - 1)), (max(a, hi + 1), b))
                      if piece[0] <= piece[1]]
        out += [{"first_offset": a, "last_offset": b, "delivery_count": r.delivery_count}
                for a, b in pieces]
    return out


async def _start_offset(plog: PartitionLogApi, reset: str) -> int:
    """Where the group starts on a partition where it has no state yet (share.auto.offset.reset):
    the log start, the high watermark, or by_duration: the first record at most that old (the
    high watermark when there is none)."""
    if reset == EARLIEST:
        return plog.log_start_offset
    duration = by_duration_ms(reset)
    if duration is None:
        return plog.high_watermark  # latest
    found = await plog.offset_for_timestamp(int(time.time() * 1000) - duration)
    return plog.high_watermark if found is None else found[0]


async def _acquire_partition(ctx: RequestContext, share: ShareGroupsApi, group_id: str,
                             member_id: str, name: str, partition: int, budget: int,
                             answer: dict) -> int:
    """Acquire and read up to `budget` records of one partition into `answer`; how many."""
    plog = await open_partition(ctx, name, partition)
    settings = share.settings(group_id)
    start_at = plog.log_start_offset  # unused once the group has state here
    if await share.end_offset(group_id, name, partition) is None:
        # the group starts here now: where it starts must follow its stored config, even if
        # it was set through another broker a moment ago
        settings = await share.fresh_settings(group_id)
        start_at = await _start_offset(plog, settings.auto_offset_reset)
    read_committed = settings.isolation_level == READ_COMMITTED
    fetchable_end = plog.last_stable_offset if read_committed else plog.high_watermark
    ranges = await share.acquire(group_id, name, partition, member_id, budget,
                                 fetchable_end=fetchable_end, log_start=plog.log_start_offset,
                                 start_at=start_at)
    if not ranges:
        return 0
    try:
        batches = await _read_ranges(plog, ranges)
        holes = _aborted_offsets(plog, batches) if read_committed else []
    except Exception as exc:
        # the partition answers with its error; the records go back now, not at lock expiry
        await _give_back(share, group_id, member_id, name, partition,
                         [(r.first, r.last, r.delivery_count) for r in ranges],
                         f"reading them failed ({exc!r})", logging.INFO)
        raise
    archive = [(max(lo, r.first), min(hi, r.last)) for lo, hi in holes for r in ranges
               if lo <= r.last and hi >= r.first]
    if settings.dead_letter_topic:
        exhausted = {o: r.delivery_count for r in ranges
                     if r.delivery_count > settings.delivery_count_limit
                     for o in range(r.first, r.last + 1)
                     if not any(lo <= o <= hi for lo, hi in holes)}
        if exhausted:
            runs = _runs(sorted(exhausted))
            holes = holes + runs  # never handed to the member
            try:
                await share.dead_letter(group_id, name, partition, batches, exhausted)
                archive += runs
            except Exception as exc:  # noqa: BLE001 - given back: copied on a later fetch
                await _give_back(share, group_id, member_id, name, partition,
                                 [(max(lo, r.first), min(hi, r.last), r.delivery_count)
                                  for lo, hi in runs for r in ranges
                                  if lo <= r.last and hi >= r.first],
                                 f"copying them to the dead-letter topic failed ({exc!r})",
                                 logging.WARNING)
    if archive:
        await share.acknowledge(group_id, name, partition, member_id,
                                [(lo, hi, (ACK_GAP,)) for lo, hi in sorted(archive)])
    acquired = _minus(ranges, holes)
    answer["records"] = batches
    answer["acquired_records"] = acquired
    return sum(a["last_offset"] - a["first_offset"] + 1 for a in acquired)


async def _give_back(share: ShareGroupsApi, group_id: str, member_id: str, name: str,
                     partition: int, ranges: list[tuple[int, int, int]], why: str,
                     level: int) -> None:
    """Hand acquired records that never reach the member back at once: another consumer gets
    them without waiting for the acquisition lock to expire.  One line at `level` (INFO when
    the fault itself is logged as the partition's error code is chosen)."""
    count = sum(last - first + 1 for first, last, _ in ranges)
    try:
        back = await share.give_back(group_id, name, partition, member_id, ranges)
    except Exception as exc:  # noqa: BLE001 - moved away: the lock's expiry returns them
        log.warning("share group %s: %d records of %s-%d not handed out, %s; giving them back "
                    "failed too (%r): they come back when their lock expires", group_id, count,
                    name, partition, why, exc)
        return
    log.log(level, "share group %s: %d records of %s-%d not handed out, %s; %d given back "
            "uncounted", group_id, count, name, partition, why, back)


async def _wait_for_any(ctx: RequestContext, share: ShareGroupsApi, group_id: str,
                        targets: list[tuple[str, int]], timeout_s: float) -> None:
    """Sleep until a partition gets new data past the group's end offset, records come back,
    or `timeout_s` passes."""
    read_committed = share.settings(group_id).isolation_level == READ_COMMITTED
    async with trio.open_nursery() as nursery:
        async def on_data(name: str, partition: int) -> None:
            try:
                plog = await open_partition(ctx, name, partition)
                end = await share.end_offset(group_id, name, partition)
                fetchable = plog.last_stable_offset if read_committed else plog.high_watermark
                if end is not None and end < fetchable:
                    return  # records wait but the in-flight window is full: wait for a change
                await plog.wait_for_data(plog.high_watermark if end is None else end,
                                         timeout_s, committed=read_committed)
            except Exception:  # noqa: BLE001 - the next round answers the error
                return
            nursery.cancel_scope.cancel()

        async def on_change(name: str, partition: int) -> None:
            try:
                await share.wait_for_change(name, partition, group_id, int(timeout_s * 1000))
            except Exception:  # noqa: BLE001 - moved away: the next round answers the error
                return
            nursery.cancel_scope.cancel()

        nursery.cancel_scope.deadline = trio.current_time() + timeout_s
        for name, partition in targets:
            nursery.start_soon(on_data, name, partition)
            nursery.start_soon(on_change, name, partition)
        await trio.sleep_forever()


def _who(ctx: RequestContext, body: dict) -> tuple[ShareGroupsApi, str, str, int, int]:
    """(share groups, group id, member id, session epoch, group READ refusal code or 0)."""
    group_id = body.get("group_id") or ""
    denied = group_denied_code(ctx, OP_READ, group_id) if group_id else 0
    return (share_groups_of(ctx), group_id, body.get("member_id") or "",
            int(body.get("share_session_epoch", 0)), denied)


async def handle_share_fetch(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    share, group_id, member_id, epoch, denied = _who(ctx, body)
    if denied:
        return _top_error(denied, None)
    try:
        session = _begin_session(share, group_id, member_id, epoch, _has_acks(body))
    except KafkaProtocolError as exc:
        return _top_error(exc.code, exc.message)
    infos = {info.topic_id: info for info in ctx.topics.topics().values()}
    names = {tid: info.name for tid, info in infos.items()}
    answers = _Answers(ctx.broker.config.broker_id)
    if epoch != CLOSE_EPOCH:
        for t in body.get("topics") or []:
            for p in t.get("partitions") or []:
                session.partitions[(t["topic_id"], int(p["partition_index"]))] = None
        for t in body.get("forgotten_topics_data") or []:
            for p in t.get("partitions") or []:
                session.partitions.pop((t["topic_id"], int(p)), None)
    await _acknowledge_all(ctx, share, group_id, member_id, body, answers, names, True)
    lock_ms = share.settings(group_id).record_lock_duration_ms
    if epoch == CLOSE_EPOCH:
        share.sessions.close(group_id, member_id)
        await share.release_member(group_id, member_id)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "acquisition_lock_timeout_ms": lock_ms,
                "responses": answers.responses(True), "node_endpoints": []}

    max_records = int(body.get("max_records") or DEFAULT_MAX_RECORDS)
    max_wait_s = min(max(int(body.get("max_wait_ms", 0)), 0) / 1000.0, MAX_WAIT_CAP_S)
    deadline = trio.current_time() + max_wait_s
    while True:
        targets: list[tuple[str, int]] = []
        total = failed = 0
        for topic_id, partition in list(session.partitions):
            name = names.get(topic_id)
            if name is None:
                answers.of(topic_id, partition)["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_ID)
                continue
            if not ctx.authorize(OP_READ, RES_TOPIC, name):
                answers.of(topic_id, partition)["error_code"] = int(
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            targets.append((name, partition))
            if total >= max_records:
                continue
            answer = answers.of(topic_id, partition)
            try:
                total += await _acquire_partition(ctx, share, group_id, member_id, name,
                                                  partition, max_records - total, answer)
            except Exception as exc:  # noqa: BLE001 - becomes this partition's error code
                answer["error_code"], answer["error_message"] = error_code_of(exc), None
                failed += 1
        remaining = deadline - trio.current_time()
        if total or failed or remaining <= 0 or not targets or _has_acks(body):
            break
        await _wait_for_any(ctx, share, group_id, targets, remaining)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout_ms": lock_ms, "responses": answers.responses(True),
            "node_endpoints": []}


async def handle_share_acknowledge(ctx: RequestContext, header: RequestHeader,
                                   body: dict) -> dict:
    share, group_id, member_id, epoch, denied = _who(ctx, body)
    if denied:
        return _top_error(denied, None)
    try:
        if epoch == OPEN_EPOCH:
            raise ShareSessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                    "ShareAcknowledge cannot open a share session")
        _begin_session(share, group_id, member_id, epoch, False)
    except KafkaProtocolError as exc:
        return _top_error(exc.code, exc.message)
    names = {info.topic_id: info.name for info in ctx.topics.topics().values()}
    answers = _Answers(ctx.broker.config.broker_id)
    await _acknowledge_all(ctx, share, group_id, member_id, body, answers, names, False)
    if epoch == CLOSE_EPOCH:
        share.sessions.close(group_id, member_id)
        await share.release_member(group_id, member_id)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout_ms": share.settings(group_id).record_lock_duration_ms,
            "responses": answers.responses(False), "node_endpoints": []}
