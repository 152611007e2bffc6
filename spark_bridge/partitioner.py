"""Kafka's default partitioner for keyed records: murmur2 of the key bytes.

The Java client (and librdkafka's "murmur2_random") put a keyed record in partition
`toPositive(murmur2(key)) % numPartitions`, where toPositive clears the sign bit. Backfills use
the same rule so that keyed history lands where a Kafka producer would have put it (and where
consumers relying on key -> partition expect it). Constants from Kafka's Utils.murmur2:
seed 0x9747b28c, m 0x5bd1e995, r 24, tail bytes folded in little-endian order.

This module is pure: it must never do I/O.
"""

from __future__ import annotations

_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data`, as a signed 32-bit int (like Java's)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, got {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
