"""Which rule decides how much of a topic stays on bookies: the topic's KIP-405 configs, then
its namespace's policies, then [offload]."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gateway.topics.offload_service import OffloadService


@dataclass
class _Policies:
    offload_threshold_mb: int | None = None
    offload_threshold_seconds: float | None = None


@dataclass
class _Namespaces:
    policies_by_namespace: dict[str, _Policies] = field(default_factory=dict)

    def namespace_of(self, topic: str) -> str:
        return "public/default"

    def policies(self, namespace: str) -> _Policies:
        return self.policies_by_namespace.get(namespace, _Policies())


@dataclass
class _Info:
    configs: dict[str, str]


class _Topics:
    def __init__(self, configs: dict[str, str], policies: _Policies) -> None:
        self.namespaces = _Namespaces({"public/default": policies})
        self._configs = configs

    def topics(self) -> dict[str, _Info]:
        return {"t": _Info(self._configs)}


@pytest.mark.parametrize(
    ("configs", "policies", "expected"),
    [
        ({}, _Policies(), (10 << 20, 3600.0)),  # [offload]
        ({}, _Policies(offload_threshold_mb=0), (0, 3600.0)),  # the namespace's
        ({"remote.storage.enable": "false"}, _Policies(offload_threshold_mb=0), (None, None)),
        ({"remote.storage.enable": "true"}, _Policies(), (0, None)),  # every closed ledger
        ({"local.retention.bytes": "1024"}, _Policies(offload_threshold_mb=0), (1024, 3600.0)),
        ({"local.retention.bytes": "-1", "local.retention.ms": "60000"}, _Policies(),
         (None, 60.0)),
        ({"local.retention.ms": "-1"}, _Policies(offload_threshold_seconds=5), (10 << 20, None)),
        ({"local.retention.bytes": "-2", "local.retention.ms": "-2"},
         _Policies(offload_threshold_mb=1), (1 << 20, 3600.0)),
    ],
)
def test_the_topic_wins_over_its_namespace_and_the_broker(
    configs: dict[str, str], policies: _Policies, expected: tuple[int | None, float | None]
) -> None:
    service = OffloadService(_Topics(configs, policies), threshold_bytes=10 << 20,
                             threshold_s=3600)
    assert service.thresholds_of("t") == expected
