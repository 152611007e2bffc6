"""What a partition log runs with: the topic's limits and the log's own tuning.

`PartitionLogConfig` holds the topic configs a partition log enforces on append
(max.message.bytes, message.timestamp.type / .difference.max.ms, a compacted topic's key rule),
which topic_configs.py works out from the topic's configs and the broker's and changes in place
on an open log when they are altered, and the log's tuning (tail cache size, producer snapshot
interval, producer id expiry, offset index density, replay chunk, the sequence-gap wait).

This module must never hold behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PartitionLogConfig:
    max_message_bytes: int = 1048588
    log_append_time: bool = False  # topic config message.timestamp.type=LogAppendTime
    tail_cache_bytes: int = 16 << 20
    snapshot_interval_batches: int = 1000
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    max_timestamp_diff_ms: int | None = None
    index_append_interval: int = 8
    replay_chunk_entries: int = 256
    compacted: bool = False  # cleanup.policy has "compact": records need keys
    # How long a batch ahead of its producer's sequence waits for the earlier ones (see append):
    # short, because a batch still ahead is refused retriably, and a client whose earlier batch
    # was refused resends it only once this one is answered (librdkafka drains first)
    sequence_gap_wait_s: float = 0.25
