"""Topic configs as they change (a mixin of TopicService, topic_service.py): altering a topic's
configs by compare-and-set on its node, dynamic broker defaults below them, and giving the
partitions open here the result (their managed ledger's and partition log's configs), then
running retention on them at once.  What a config means for a partition is topic_configs.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gateway.topics.partition_log import PartitionLog
from gateway.topics.partition_log_config import PartitionLogConfig
from gateway.topics.topic_configs import (
    TopicServiceConfig,
    partition_configs,
    validate_topic_configs,
)
from gateway.topics.topic_node import TopicInfo
from gateway.topics.topic_store import TopicStore
from ledger_backend.faults import log_failure
from ledger_backend.managed_ledger.types import ManagedLedgerConfig
from ledger_backend.metadata.store import BadVersionError
from protocols.kafka.errors import KafkaProtocolError, UnknownTopicOrPartitionError

# topic_service.py's logger, as before these moved here
log = logging.getLogger("gateway.topics.topic_service")


class TopicConfigUpdates:
    config: TopicServiceConfig
    namespaces: Any
    topic_store: TopicStore
    _topics: dict[str, TopicInfo]
    _logs: dict[tuple[str, int], PartitionLog]
    _partition_ledgers: dict[tuple[str, int], Any]
    _broker_defaults: dict[str, str]

    if TYPE_CHECKING:

        def _put_topic(self, info: TopicInfo) -> None: ...

        def _drop_topic(self, name: str) -> None: ...

    async def alter_topic_configs(
        self, name: str, update: Callable[[Mapping[str, str]], dict[str, str]], *,
        validate_only: bool = False, attempts: int = 10,
    ) -> TopicInfo:
        """Replace a topic's configs with `update(current configs)`, by CAS on the topic node.

        `update` may raise (InvalidConfigError, ...) to refuse the change; it is called again
        with fresh configs when another writer changed the node meanwhile.  With
        `validate_only` nothing is written.  Returns the topic as it now is.
        """
        for _ in range(attempts):
            loaded = await self.topic_store.read(name)
            if loaded is None or loaded[1]:
                self._drop_topic(name)
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            info, _, version = loaded
            configs = {k: str(v) for k, v in update(dict(info.configs)).items()}
            validate_topic_configs(configs)
            new = TopicInfo(name, info.topic_id, info.partitions, configs)
            if validate_only:
                return new
            try:
                await self.topic_store.write(new, version)
            except BadVersionError:
                continue
            self._put_topic(new)
            log.info("altered configs of topic %s", name, extra={"configs": configs})
            await self._apply_topic_configs(new)
            return new
        raise KafkaProtocolError(f"topic {name!r} kept changing; configs not altered")

    async def _apply_topic_configs(self, info: TopicInfo) -> None:
        """Give the open partitions of `info` its configs, then run retention on them."""
        ml_config, plog_config = self._partition_configs(info)
        for p in range(info.partitions):
            plog = self._logs.get((info.name, p))
            ml = self._partition_ledgers.get((info.name, p))
            if plog is None or ml is None or plog.failed or plog.closed:
                continue
            ml.config = ml_config  # what ManagedLedgerFactory.open(name, config) does too
            plog.config.max_message_bytes = plog_config.max_message_bytes
            plog.config.log_append_time = plog_config.log_append_time
            plog.config.max_timestamp_diff_ms = plog_config.max_timestamp_diff_ms
            plog.config.compacted = plog_config.compacted
            try:
                await plog.apply_retention()
            except Exception:  # e.g. a hand-off racing retention: the next owner applies it
                log_failure(log, "retention of %s failed", plog.name)

    async def reapply_configs(self) -> None:
        """Give every open partition its configs again (namespace policies changed), then run
        retention on it."""
        for info in list(self._topics.values()):
            await self._apply_topic_configs(info)

    async def set_broker_defaults(self, defaults: dict[str, str]) -> None:
        """Topic-config defaults from dynamic broker configs (topic config name -> value), below
        each topic's own configs and (for retention) its namespace's policy; applied to the open
        partitions at once."""
        if defaults == self._broker_defaults:
            return
        self._broker_defaults = dict(defaults)
        await self.reapply_configs()

    def effective_configs(self, info: TopicInfo) -> dict[str, str]:
        """A topic's own configs over the dynamic broker defaults (retention aside: a namespace
        policy sits between those two, see _partition_configs)."""
        merged = {k: v for k, v in self._broker_defaults.items()
                  if k not in ("retention.ms", "retention.bytes")}
        merged.update(info.configs)
        return merged

    def _partition_configs(self, info: TopicInfo) -> tuple[ManagedLedgerConfig, PartitionLogConfig]:
        """The managed-ledger and partition-log configs a partition of `info` runs with."""
        return partition_configs(info.name, self.effective_configs(info), self.config,
                                 self._broker_defaults, self.namespaces)
