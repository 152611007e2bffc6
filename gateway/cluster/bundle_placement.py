"""Where partitions live in a cluster: bundles, and which broker should own each.

A cluster has a fixed number of bundles (layout node, broker_registry.py).  Topic partition
(t, p) lives in bundle (crc32(t) + p) mod B, so consecutive partitions of a topic land in
consecutive bundles and spread over brokers; the group-coordinator partitions
("__consumer_offsets", i) and transaction-coordinator partitions ("__transaction_state", i) are
placed the same way.  RocketMQ's internal topics (retry, dead-letter, delay and transaction
topics) are "bundle-pinned": partition p in bundle p mod B, so what one bundle's RocketMQ broker
writes to them stays in that bundle (gateway/rocketmq/cluster.py).
Which broker *should* own a bundle is decided by rendezvous hashing over the live,
non-draining brokers: every broker computes the same answer from the same lists without
talking to the others, and a broker joining or leaving moves only the bundles it wins or held
(about 1/n of them), which keeps ledger recoveries few.

Pure functions of their arguments: this module must never read ZooKeeper or any broker state,
so every broker (and a benchmark or test) computes the same placement.
"""

from __future__ import annotations

import hashlib
import zlib

GROUP_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"

# RocketMQ's internal topics (storage names: '%' -> '.'): retry, dead-letter, delay-level and
# transaction topics.  Their partition p lives in bundle p mod B ("bundle-pinned"), so what a
# bundle's RocketMQ broker writes to them (retries, delays) stays in that bundle.
BUNDLE_PINNED_PREFIXES = (".RETRY.", ".DLQ.", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_")


def is_bundle_pinned(topic: str) -> bool:
    return topic.startswith(BUNDLE_PINNED_PREFIXES)


def bundle_of(topic: str, partition: int, bundles: int) -> int:
    if is_bundle_pinned(topic):
        return partition % bundles
    return (zlib.crc32(topic.encode("utf-8")) + partition) % bundles


def coordinator_partition(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode("utf-8")) % partitions


def target_broker(bundle: int, eligible: list[int]) -> int | None:
    """Rendezvous (highest random weight) choice of a bundle's broker among `eligible`."""
    if not eligible:
        return None

    def weight(node_id: int) -> bytes:
        return hashlib.blake2b(f"{bundle}/{node_id}".encode(), digest_size=8).digest()

    return max(eligible, key=weight)


def eligible_brokers(live: set[int], draining: set[int]) -> list[int]:
    """Live brokers not draining; all live ones if every one of them is draining."""
    return sorted(live - draining) or sorted(live)

