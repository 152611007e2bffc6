"""Per-topic replication policy: E/Qw/Qa from a topic's configs, defaults from the broker's.

Topic configs (CreateTopics / AlterConfigs, names after Pulsar's persistence policies):

    bookkeeper.ensemble.size   E   bookies a ledger is striped over
    bookkeeper.write.quorum    Qw  copies of each entry
    bookkeeper.ack.quorum      Qa  copies acknowledged before a produce is answered

`QuorumPolicyFactory` wraps the managed-ledger factory the topic service opens partitions
through: when a partition's managed ledger is opened it replaces the quorums of the config
with the topic's own (any not set keep the broker default), so the topic service needs no
change.  Placement then never puts two copies of an entry on one bookie (ledger client).

This module must never open a ledger with E >= Qw >= Qa >= 1 violated: a bad topic setting
falls back to the broker defaults, with a warning.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ledger_backend.managed_ledger import ManagedLedgerConfig

log = logging.getLogger("ledgerwire.topic_quorums")

ENSEMBLE_SIZE = "bookkeeper.ensemble.size"
WRITE_QUORUM = "bookkeeper.write.quorum"
ACK_QUORUM = "bookkeeper.ack.quorum"
QUORUM_CONFIGS = (ENSEMBLE_SIZE, WRITE_QUORUM, ACK_QUORUM)


def quorums_for(configs: Mapping[str, str], default: ManagedLedgerConfig) -> ManagedLedgerConfig:
    """`default` with the quorums the topic configs set (invalid ones ignored, logged)."""
    if not any(key in configs for key in QUORUM_CONFIGS):
        return default
    try:
        e = int(configs.get(ENSEMBLE_SIZE, default.ensemble_size))
        qw = int(configs.get(WRITE_QUORUM, default.write_quorum))
        qa = int(configs.get(ACK_QUORUM, default.ack_quorum))
    except ValueError:
        log.warning("topic quorum settings are not integers: %s", dict(configs))
        return default
    if not e >= qw >= qa >= 1:
        log.warning("topic quorums E=%d Qw=%d Qa=%d violate E >= Qw >= Qa >= 1; using "
                    "the defaults", e, qw, qa)
        return default
    return dataclasses.replace(default, ensemble_size=e, write_quorum=qw, ack_quorum=qa)


class QuorumPolicyFactory:
    """A managed-ledger factory that applies each topic's quorums (see the module docstring).

    `namespace` says where topics live, as the topic service names their ledgers
    ("<tenant>/<namespace>/<topic>-<partition>"): one namespace for every topic, or the
    namespace registry's mapping topic -> namespace (NamespaceRegistry.namespace_of), under
    which a topic may live in any namespace."""

    def __init__(self, inner: Any, namespace: str | Callable[[str], str],
                 topic_configs: Callable[[str], Mapping[str, str] | None]) -> None:
        self._inner = inner
        if isinstance(namespace, str):
            only = namespace.rstrip("/")
            self._namespace_of: Callable[[str], str] = lambda topic: only
        else:
            self._namespace_of = namespace
        self._topic_configs = topic_configs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def topic_of(self, ledger_name: str) -> str | None:
        """The topic whose partition ledger this is, or None (a system ledger, or a name that
        is not where the topic lives).  Kafka topic names never contain "/"."""
        namespace, sep, rest = ledger_name.rpartition("/")
        if not sep:
            return None
        topic, sep, partition = rest.rpartition("-")
        if not (sep and topic and partition.isdigit()):
            return None
        return topic if self._namespace_of(topic) == namespace else None

    async def open(self, name: str, config: ManagedLedgerConfig | None = None, *,
                   create_with: Sequence[Any] = ()) -> Any:
        topic = self.topic_of(name)
        if topic is not None and config is not None:
            configs = self._topic_configs(topic)
            if configs:
                config = quorums_for(configs, config)
        return await self._inner.open(name, config, create_with=create_with)
