"""DescribeLogDirs (35): `kafka-log-dirs.sh --describe`, AdminClient.describeLogDirs and
describeReplicaLogDirs, with the real size of every partition this broker serves.

A broker's partitions live in the ledger store, not in a directory of segment files, so each
broker answers one "log dir": its configured `log_dir` (a standalone's data directory, whose
disk gives TotalBytes/UsableBytes; a cluster broker names its ledger store and reports -1 for
both, its bookies' disks being elsewhere).  Each partition's size is the bytes of its managed
ledger's ledgers (every stored batch), from the topic service; offset lag is 0 (the one copy
clients see is the leader) and there are no future replicas.  Only partitions this broker owns
are listed (a cluster's other partitions are answered by their owners, as Kafka answers only
the replicas a broker holds); `topics` null means all of them.  DESCRIBE on the cluster is
required: otherwise v3+ answers CLUSTER_AUTHORIZATION_FAILED and older versions an empty list,
as Kafka does.

This module must never open a partition this broker does not own (opening fences the owner).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import trio

from protocols.kafka.acl_model import CLUSTER_NAME, OP_DESCRIBE, RES_CLUSTER
from protocols.kafka.broker_api import RequestContext, ownership_of
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers.error_responses import error_code_of

DESCRIBE_LOG_DIRS = 35
DEFAULT_LOG_DIR = "ledgerwire-ledger-store"


def _requested(ctx: RequestContext, body: dict) -> list[tuple[str, list[int]]]:
    """(topic, partitions) asked for and served here, in name order."""
    topics = ctx.topics.topics()
    wanted: dict[str, set[int]] = {}
    if body.get("topics") is None:
        for name, info in topics.items():
            wanted[name] = set(range(info.partitions))
    else:
        for item in body.get("topics") or []:
            info = topics.get(str(item.get("topic", "")))
            if info is not None:
                wanted.setdefault(info.name, set()).update(
                    int(p) for p in item.get("partitions") or [] if 0 <= int(p) < info.partitions)
    ownership = ownership_of(ctx.broker)
    return [(name, [p for p in sorted(parts)
                    if ownership is None or ownership.is_local(name, p)])
            for name, parts in sorted(wanted.items())]


def _disk(path: str) -> tuple[int, int]:
    if not os.path.isdir(path):
        return -1, -1
    usage = shutil.disk_usage(path)
    return usage.total, usage.free


async def handle_describe_log_dirs(ctx: RequestContext, header: RequestHeader,
                                   body: dict) -> dict:
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "results": []}
    if not ctx.authorize(OP_DESCRIBE, RES_CLUSTER, CLUSTER_NAME):
        if header.api_version >= 3:
            answer["error_code"] = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return answer
    log_dir = getattr(ctx.broker.config, "log_dir", None) or DEFAULT_LOG_DIR
    total, usable = await trio.to_thread.run_sync(_disk, log_dir)
    dir_code = 0
    topics_out = []
    for name, partitions in _requested(ctx, body):
        rows = []
        for index in partitions:
            try:
                size = await ctx.topics.partition_size(name, index)
            except Exception as exc:  # noqa: BLE001 - a storage failure marks the log dir
                dir_code = int(error_code_of(exc))
                continue
            rows.append({"partition_index": index, "partition_size": size, "offset_lag": 0,
                         "is_future_key": False})
        if rows:
            topics_out.append({"name": name, "partitions": rows})
    answer["results"] = [{"error_code": dir_code, "log_dir": log_dir, "topics": topics_out,
                          "total_bytes": total, "usable_bytes": usable}]
    return answer
