"""Geo-replication's part in a cluster broker's bundle ownership (a bundle extension).

The replicator of a partition runs on the broker that owns the partition's bundle: the
replication service starts the replicators of owned partitions on its scans
(gateway/replication/service.py, filtered by the ownership lease), and this extension stops
and awaits those of a bundle when it is released, before its partition logs close.  The next
owner starts them from their durable checkpoints.

This module must never start a replicator itself (only the service's scan does, after the
bundle is ready here), nor return from `releasing` while a replicator of the bundle runs
(short of the service's stop timeout).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.replication.service import ReplicationService


class ReplicationBundles:
    """acquired / releasing hooks for the cluster broker (gateway/process/cluster_broker.py)."""

    def __init__(self, service: ReplicationService,
                 bundle_of: Callable[[str, int], int]) -> None:
        self._service = service
        self._bundle_of = bundle_of

    async def acquired(self, bundle: int) -> None:
        """Nothing: the bundle is not ready (not owned, to the lease) until the hooks return;
        the service's next scan starts its replicators."""

    async def releasing(self, bundle: int) -> None:
        await self._service.stop_where(lambda topic, p: self._bundle_of(topic, p) == bundle)

    def __repr__(self) -> str:
        return "ReplicationBundles()"
