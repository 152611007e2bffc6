"""Tiered storage for the partitions this broker has open (and so owns).

`run` wakes every `interval_s`: for each open partition it offloads closed ledgers until at
most the size threshold stays on bookies and ledgers older than the age threshold are
offloaded (the topic's remote.storage.enable / local.retention.bytes / local.retention.ms,
else the namespace policies offload_threshold_mb / offload_threshold_seconds, else
[offload] threshold_mb / threshold_seconds; -1 = never), and deletes the bookie copies of
ledgers offloaded at least the deletion lag ago (the topic's offload.deletion.lag.ms, else
the namespace's offload_deletion_lag_seconds, else [offload] deletion_lag_s; -1 keeps
them). `offload_topic` offloads every closed ledger of a topic's open partitions now
(admin API, `ledgerwire admin topics offload`); `status` answers `offload-status`. The
steps and their crash safety live in ledger_backend/managed_ledger/offloading.py.

A partition is offloaded only through its open PartitionLog's managed ledger, which only the
owner has: in a cluster, only the owner offloads. This module must never open a partition to
offload it (that would take ownership); a failed pass is one WARNING line, never a crash
(an object store that is down only delays offloading).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from gateway.config.settings import OffloadConfig
from ledger_backend.client.errors import LedgerError
from ledger_backend.managed_ledger import ManagedLedgerError
from ledger_backend.managed_ledger.offload_policy import offload_lag
from ledger_backend.metadata.store import MetadataError
from ledger_backend.offload import FilesystemOffloader, Offloader, OffloadError

log = logging.getLogger("ledgerwire.offload")

# staged files ("*.tmp-*", a crash's leftovers) untouched this long are removed, at start and
# then every _SWEEP_EVERY_S (the age spares another broker's upload in a shared directory)
_STAGED_GRACE_S = 600.0
_SWEEP_EVERY_S = 3600.0

_EXPECTED = (ManagedLedgerError, LedgerError, MetadataError, OffloadError, OSError)


def offloader_from_config(config: OffloadConfig, data_dir: Path) -> Offloader | None:
    """The configured offloader ([offload] driver), or None when offloading is off."""
    if config.driver == "filesystem":
        return FilesystemOffloader(config.directory or Path(data_dir) / "offload")
    if config.driver == "s3":
        from ledger_backend.offload.object_store import ObjectStoreOffloader

        return ObjectStoreOffloader.s3(
            config.bucket, prefix=config.prefix, region=config.region,
            endpoint=config.endpoint or None, access_key_id=config.access_key_id or None,
            secret_access_key=config.secret_access_key or None,
        )
    return None


@dataclass
class PartitionOffload:
    """What the admin API shows of one partition's offloading (besides its ledger list)."""

    running: bool = False
    last_error: str | None = None
    last_run_ms: int = 0
    ledgers_offloaded_total: int = 0
    bookie_copies_deleted_total: int = 0
    failures: int = 0


class OffloadService:
    def __init__(self, topics: Any, *, threshold_bytes: int = OffloadConfig().threshold_bytes,
                 threshold_s: float = OffloadConfig.threshold_seconds,
                 deletion_lag_s: float = OffloadConfig.deletion_lag_s,
                 interval_s: float = OffloadConfig.interval_s,
                 offloader: Offloader | None = None) -> None:
        self._topics = topics  # gateway.topics.topic_service.TopicService
        self._offloader = offloader  # the factory's: its staged leftovers are swept
        self.threshold_bytes = threshold_bytes
        self.threshold_s = threshold_s
        self.deletion_lag_s = deletion_lag_s
        self.interval_s = interval_s
        self._state: dict[tuple[str, int], PartitionOffload] = {}
        # the configured driver at namespaces' own locations (offloader_of)
        self._placed: dict[tuple[str, tuple[tuple[str, str], ...]], Offloader] = {}
        self._lock = trio.Lock()  # one offload at a time on this broker

    def state(self, topic: str, partition: int) -> PartitionOffload:
        return self._state.setdefault((topic, partition), PartitionOffload())

    def forget_topic(self, topic: str) -> None:
        """Drop the state of a topic that is gone (deleted here or elsewhere): a churn of
        topics grew it without bound, and a topic created again under the name showed the
        old one's passes."""
        for key in [k for k in self._state if k[0] == topic]:
            del self._state[key]

    async def run(self) -> None:
        """Passes forever (start it in the broker's background nursery); staged files a crash
        left are swept at start and hourly."""
        next_sweep = trio.current_time()
        while True:
            if trio.current_time() >= next_sweep:
                await self.sweep_staged(_STAGED_GRACE_S)
                next_sweep = trio.current_time() + _SWEEP_EVERY_S
            await trio.sleep(self.interval_s)
            try:
                await self.run_once()
            except Exception:  # a background pass must never take the broker down
                log.warning("offload pass failed", exc_info=True)

    async def sweep_staged(self, older_than_s: float) -> int:
        """Remove the driver's staged files left by a crash (FilesystemOffloader.sweep_staged;
        other drivers stage nothing a reader could see), at [offload]'s place and at every
        namespace's own offload_directory; how many were removed."""
        removed = 0
        for offloader in self._sweep_places():
            sweep = getattr(offloader, "sweep_staged", None)
            if sweep is None:
                continue
            try:
                removed += await sweep(older_than_s)
            except OSError as exc:
                log.warning("sweeping staged offload files at %s failed: %s",
                            offloader.location, exc)
        if removed:
            log.info("removed %d staged offload file(s) left by an interrupted offload", removed)
        return removed

    def _sweep_places(self) -> list[Offloader]:
        configured = self._offloader
        if configured is None:
            return []
        places = {configured.location: configured}
        registry = getattr(self._topics, "namespaces", None)
        if registry is not None and configured.driver == "filesystem":
            for namespace in registry.namespaces():
                try:
                    directory = registry.policies(namespace).offload_directory
                except ValueError:  # NamespaceError: deleted meanwhile
                    continue
                if directory:
                    placed = configured.at({**configured.location_fields,
                                            "directory": directory})
                    places.setdefault(placed.location, placed)
        return list(places.values())

    def _policies(self, topic: str) -> Any:
        registry = getattr(self._topics, "namespaces", None)
        if registry is None:
            return None
        try:
            return registry.policies(registry.namespace_of(topic))
        except ValueError:  # NamespaceError: the namespace went away meanwhile
            return None

    def offloader_of(self, topic: str, configured: Offloader) -> Offloader:
        """Where `topic`'s ledgers are offloaded: the configured driver at its namespace's
        offload_directory (filesystem) or offload_bucket / offload_prefix (s3), else the
        configured location. Reads and deletions follow each ledger's recorded location."""
        policies = self._policies(topic)
        fields = dict(configured.location_fields)
        if policies is not None and configured.driver == "filesystem":
            if policies.offload_directory:
                fields["directory"] = policies.offload_directory
        elif policies is not None and configured.driver == "s3":
            if policies.offload_bucket:
                fields["bucket"] = policies.offload_bucket
            if policies.offload_prefix:
                fields["prefix"] = policies.offload_prefix
        place = tuple(sorted(fields.items()))
        if fields == configured.location_fields:
            return configured
        found = self._placed.get((configured.driver, place))
        if found is None:
            found = self._placed[(configured.driver, place)] = configured.at(fields)
        return found

    def deletion_lag_of(self, topic: str) -> float | None:
        """Seconds after an offload's verification that the bookie copy goes (None: kept):
        the topic's offload.deletion.lag.ms (-1 keep, -2 inherit), then the namespace's
        offload_deletion_lag_seconds (-1 keep), then [offload] deletion_lag_s."""
        info = self._topics.topics().get(topic)
        configs = info.configs if info is not None else {}
        topic_ms = int(configs.get("offload.deletion.lag.ms", -2))
        if topic_ms != -2:
            return None if topic_ms < 0 else topic_ms / 1000
        policies = self._policies(topic)
        if policies is not None and policies.offload_deletion_lag_seconds is not None:
            lag = policies.offload_deletion_lag_seconds
            return None if lag < 0 else float(lag)
        return self.deletion_lag_s

    def thresholds_of(self, topic: str) -> tuple[int | None, float | None]:
        """(bytes kept on bookies, age offloaded) for `topic`'s partitions, None = that rule
        is off. The topic's own configs win (KIP-405's names: `remote.storage.enable=false`
        never offloads; `local.retention.bytes` / `local.retention.ms` >= 0 set the rule,
        -1 turns it off, -2 inherits; `remote.storage.enable=true` with neither set offloads
        every closed ledger, as Kafka copies every closed segment); then the namespace
        policies offload_threshold_mb / _seconds; then [offload] threshold_mb /
        threshold_seconds (-1 = off)."""
        size: float = self.threshold_bytes
        age: float = self.threshold_s
        policies = self._policies(topic)
        if policies is not None and policies.offload_threshold_mb is not None:
            mb = policies.offload_threshold_mb
            size = -1 if mb < 0 else mb << 20
        if policies is not None and policies.offload_threshold_seconds is not None:
            age = policies.offload_threshold_seconds
        info = self._topics.topics().get(topic)
        configs = info.configs if info is not None else {}
        enabled = configs.get("remote.storage.enable", "").lower()
        if enabled == "false":
            return None, None
        local_bytes = int(configs.get("local.retention.bytes", -2))
        local_ms = int(configs.get("local.retention.ms", -2))
        if enabled == "true" and local_bytes == -2 and local_ms == -2:
            return 0, None
        if local_bytes != -2:
            size = local_bytes
        if local_ms != -2:
            age = -1 if local_ms < 0 else local_ms / 1000
        return (None if size < 0 else int(size)), (None if age < 0 else float(age))

    async def run_once(self) -> None:
        for (topic, partition), plog in sorted(self._topics.open_partitions().items()):
            ml = plog.ledger
            if plog.failed or plog.closed or getattr(ml, "offloader", None) is None:
                continue
            keep, age = self.thresholds_of(topic)
            with plog.pinned():  # not unloaded as idle under the pass
                await self._pass(topic, partition, ml, keep, age,
                                 offload=keep is not None or age is not None)

    async def offload_topic(self, topic: str) -> list[dict[str, Any]]:
        """Offload every closed ledger of each partition of `topic` open here, then delete
        bookie copies that are past the deletion lag; each partition's status after."""
        out: list[dict[str, Any]] = []
        for p, plog in await self._topics.logs_here(topic):
            if plog is None:
                out.append({"partition": p, "skipped": "not open on this broker"})
                continue
            if getattr(plog.ledger, "offloader", None) is None:
                out.append({"partition": p, "skipped": "offloading is off ([offload] driver)"})
                continue
            with plog.pinned():
                done = await self._pass(topic, p, plog.ledger, None, None, offload=True)
            out.append({**self._row(topic, p, plog.ledger), "offloaded_now": done})
        return out

    def status(self, topic: str) -> list[dict[str, Any]]:
        """Per open partition of `topic`: ledgers and bytes offloaded / on bookies, the lag
        (seconds since the oldest ledger the policy wants offloaded and is not was closed,
        bytes of such ledgers), whether a pass runs, the last error."""
        return [self._row(t, p, plog.ledger)
                for (t, p), plog in sorted(self._topics.open_partitions().items()) if t == topic]

    def gauges(self, topic: str, partition: int, plog: Any) -> dict[str, float] | None:
        """Metric values of a partition (None when offloading is off)."""
        ml = plog.ledger
        if getattr(ml, "offloader", None) is None:
            return None
        row = self._row(topic, partition, ml)
        state = self.state(topic, partition)
        return {"ledgers_offloaded": row["ledgers_offloaded"],
                "lag_seconds": row["lag_seconds"],
                "lag_bytes": row["lag_bytes"],
                "bytes_offloaded": row["bytes_offloaded"],
                "bytes_on_bookies": row["bytes_on_bookies"],
                "offloaded_total": state.ledgers_offloaded_total,
                "failures": state.failures,
                "read_errors": ml.offload_read_errors,
                "store_reads": ml.offload_store_reads[0],
                "store_read_seconds": ml.offload_store_reads[1]}

    def _row(self, topic: str, partition: int, ml: Any) -> dict[str, Any]:
        ledgers = ml.ledgers
        state = self.state(topic, partition)
        lag_s, lag_bytes = offload_lag(ml, *self.thresholds_of(topic))
        return {
            "partition": partition,
            "ledgers": len(ledgers),
            "ledgers_offloaded": sum(1 for i in ledgers if i.offloaded),
            "bytes_offloaded": sum(i.size for i in ledgers if i.offloaded),
            "ledgers_on_bookies": sum(1 for i in ledgers if i.on_bookies),
            "bytes_on_bookies": sum(i.size for i in ledgers if i.on_bookies),
            # behind the policy: since the oldest ledger due for offload closed; its bytes
            "lag_seconds": round(lag_s, 3),
            "lag_bytes": lag_bytes,
            "in_progress": state.running,
            "last_run_ms": state.last_run_ms,
            "last_error": state.last_error,
        }

    async def _pass(self, topic: str, partition: int, ml: Any, keep: int | None,
                    age: float | None, *, offload: bool) -> list[int]:
        state = self.state(topic, partition)
        done: list[int] = []
        async with self._lock:
            state.running = True
            try:
                if offload:
                    done = await ml.offload(keep, age, to=self.offloader_of(topic, ml.offloader))
                lag = self.deletion_lag_of(topic)
                deleted = ([] if lag is None
                           else await ml.delete_offloaded_bookie_copies(lag))
            except _EXPECTED as exc:  # expected faults: the next pass retries
                state.last_error = f"{type(exc).__name__}: {exc}"
                state.failures += 1
                log.warning("offload of %s-%d failed: %s", topic, partition, state.last_error)
                return done
            finally:
                state.running = False
                state.last_run_ms = int(time.time() * 1000)
        state.last_error = None
        state.ledgers_offloaded_total += len(done)
        state.bookie_copies_deleted_total += len(deleted)
        if done:
            log.info("offloaded %s-%d: ledgers %s", topic, partition, done)
        return done
