"""Server-side partition assignors for KIP-848 consumer groups: "uniform" and "range".

An assignor is a pure function: members (their subscribed topics and current partitions) and
the partition counts of the subscribed topics in, a target assignment (member -> partitions)
out. "uniform" (Kafka's default) spreads partitions evenly and keeps each partition where it
is when that does not break the balance, so a rebalance moves as few partitions as possible;
"range" gives each member a contiguous range of every topic it subscribes to (co-partitioned
topics line up), members in member-id order. This module must never touch group state, time
or I/O: it computes, the consumer-group coordinator decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class AssignorMember:
    member_id: str
    subscribed_topics: frozenset[str]
    current: frozenset[TopicPartition]


Assignment = dict[str, set[TopicPartition]]


def assign_range(
    members: list[AssignorMember], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    result: Assignment = {m.member_id: set() for m in members}
    for topic, count in sorted(partitions_per_topic.items()):
        subscribers = sorted(m.member_id for m in members if topic in m.subscribed_topics)
        if not subscribers:
            continue
        per_member, extra = divmod(count, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            size = per_member + (1 if index < extra else 0)
            result[member_id].update((topic, p) for p in range(start, start + size))
            start += size
    return result


def assign_uniform(
    members: list[AssignorMember], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """Balanced and sticky: keep current owners up to the fair share, give out the rest."""
    result: Assignment = {m.member_id: set() for m in members}
    if not members:
        return result
    by_id = {m.member_id: m for m in members}
    all_partitions = sorted(
        (topic, p)
        for topic, count in partitions_per_topic.items()
        if any(topic in m.subscribed_topics for m in members)
        for p in range(count)
    )
    # Fair share when every member could take every partition: `floor` each, and `extra`
    # members may hold one more. Current owners keep partitions up to that share.
    floor, extra = divmod(len(all_partitions), len(members))
    at_ceiling = 0
    unassigned: list[TopicPartition] = []
    for tp in all_partitions:
        owner = next(
            (m.member_id for m in members if tp in m.current and tp[0] in m.subscribed_topics),
            None,
        )
        if owner is not None and len(result[owner]) < floor:
            result[owner].add(tp)
        elif owner is not None and len(result[owner]) == floor and at_ceiling < extra:
            result[owner].add(tp)
            at_ceiling += 1
        else:
            unassigned.append(tp)
    for tp in unassigned:
        eligible = [mid for mid in sorted(by_id) if tp[0] in by_id[mid].subscribed_topics]
        if eligible:
            target = min(eligible, key=lambda mid: (len(result[mid]), mid))
            result[target].add(tp)
    return result


ASSIGNORS = {"uniform": assign_uniform, "range": assign_range}
DEFAULT_ASSIGNOR = "uniform"


def moved_partitions(before: Mapping[str, Set[TopicPartition]], after: Assignment) -> int:
    """How many partitions changed owner (for logs and tests of stickiness)."""
    owner_before = {tp: mid for mid, tps in before.items() for tp in tps}
    return sum(1 for mid, tps in after.items() for tp in tps if owner_before.get(tp) != mid)
