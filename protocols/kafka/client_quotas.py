"""Kafka client quotas as data: entities, the precedence that picks a client's quota, matching
DescribeClientQuotas filters, and the rate meter that turns bytes into a throttle time.

An entity is a set of (type, name) components, type "user" or "client-id", name None for the
default entity of that type.  A client (user U, client id C) is held to the quota of the most
specific entity that sets the key, in Kafka's order:

    user=U,client-id=C   user=U,client-id=<default>   user=U
    user=<default>,client-id=C   user=<default>,client-id=<default>   user=<default>
    client-id=C   client-id=<default>

and is metered per that entity (clients sharing an entity share its rate).  Enforced keys:
`producer_byte_rate` (Produce request bytes), `consumer_byte_rate` (Fetch answer bytes) and
`controller_mutation_rate` (partitions created or deleted, handlers/mutation_quota.py).
Kafka's `request_percentage` is refused, not silently stored: ledgerwire does not enforce it.

The meter is Kafka's: samples of `SAMPLE_S` seconds over `SAMPLES` samples; when the measured
rate exceeds the quota the client is throttled for (rate - quota) / quota * window, the time
that brings its average back to the quota, at most the window.

This module must never do I/O or read a clock: callers pass the time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

USER, CLIENT_ID = "user", "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE = "producer_byte_rate", "consumer_byte_rate"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
ENFORCED_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE})
KNOWN_UNENFORCED_KEYS = frozenset({"request_percentage"})
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
SAMPLES, SAMPLE_S = 11, 1.0

Entity = tuple[tuple[str, str | None], ...]  # sorted (type, name) pairs


class QuotaError(ValueError):
    """An entity or key Kafka (or ledgerwire) refuses: INVALID_REQUEST on the wire."""


def entity_of(components: Iterable[tuple[str, str | None]]) -> Entity:
    pairs = list(components)
    types = [t for t, _ in pairs]
    if not pairs or len(set(types)) != len(types):
        raise QuotaError("a quota entity names each of its types once, and at least one")
    unknown = set(types) - set(ENTITY_TYPES)
    if unknown:
        raise QuotaError(f"unsupported quota entity type(s) {sorted(unknown)} (user, client-id)")
    return tuple(sorted(pairs, key=lambda p: ENTITY_TYPES.index(p[0])))


def check_key(key: str, value: float | None) -> None:
    if key in KNOWN_UNENFORCED_KEYS:
        raise QuotaError(f"{key} is not enforced by ledgerwire; only {sorted(ENFORCED_KEYS)}")
    if key not in ENFORCED_KEYS:
        raise QuotaError(f"unknown quota key {key!r}")
    if value is not None and not value > 0:
        raise QuotaError(f"{key} must be positive, not {value}")


def candidates(user: str | None, client_id: str) -> list[Entity]:
    """The entities that may hold this client's quota, most specific first (module doc)."""
    out: list[Entity] = []
    if user is not None:
        out += [((USER, user), (CLIENT_ID, client_id)), ((USER, user), (CLIENT_ID, None)),
                ((USER, user),)]
    out += [((USER, None), (CLIENT_ID, client_id)), ((USER, None), (CLIENT_ID, None)),
            ((USER, None),), ((CLIENT_ID, client_id),), ((CLIENT_ID, None),)]
    return out


def resolve(table: Mapping[Entity, Mapping[str, float]], user: str | None, client_id: str,
            key: str) -> tuple[Entity, float] | None:
    for entity in candidates(user, client_id):
        value = table.get(entity, {}).get(key)
        if value is not None:
            return entity, value
    return None


def matches(entity: Entity, components: list[tuple[str, int, str | None]], strict: bool) -> bool:
    """DescribeClientQuotas: (type, match type, match) components, all of which must hold."""
    named = dict(entity)
    for entity_type, match_type, match in components:
        if entity_type not in named:
            return False
        name = named[entity_type]
        if match_type == MATCH_EXACT and name != match:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
        if match_type == MATCH_SPECIFIED and name is None:
            return False
    return not strict or len(named) == len(components)


@dataclass
class RateMeter:
    """Bytes per second over the last SAMPLES samples of SAMPLE_S seconds (module doc)."""

    samples: list[tuple[float, float]] = field(default_factory=list)  # (start, bytes)

    def record(self, amount: float, now: float) -> None:
        if self.samples and now - self.samples[-1][0] < SAMPLE_S:
            start, total = self.samples[-1]
            self.samples[-1] = (start, total + amount)
        else:
            self.samples.append((now, amount))
        horizon = now - SAMPLES * SAMPLE_S
        while self.samples and self.samples[0][0] <= horizon:
            self.samples.pop(0)

    def rate(self, now: float) -> float:
        if not self.samples:
            return 0.0
        # Kafka counts the window as at least SAMPLES - 1 samples long once it has begun.
        elapsed = max(now - self.samples[0][0], (SAMPLES - 1) * SAMPLE_S)
        return sum(total for _, total in self.samples) / elapsed

    def throttle_s(self, quota: float, now: float) -> float:
        rate = self.rate(now)
        if rate <= quota:
            return 0.0
        window = SAMPLES * SAMPLE_S
        return min((rate - quota) / quota * window, window)
