"""Kafka's controller_mutation_rate quota (KIP-599) for CreateTopics, CreatePartitions and
DeleteTopics: partitions created or deleted per second, by user and client id.

Versions that know THROTTLING_QUOTA_EXCEEDED (CreateTopics v6+, CreatePartitions v3+,
DeleteTopics v5+) are strict: while the client's rate is over its quota, each topic of the
request is refused with that code; otherwise the mutation is accepted and counted.  Older
versions are accepted, counted and throttled like a byte-rate quota (the connection is not
read for the throttle time).  The meters are the broker's quota store's
(gateway/security/quota_store.py); without one nothing is limited.

This module must never change a topic: it only admits or refuses.
"""

from __future__ import annotations

import trio

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.client_quotas import CONTROLLER_MUTATION_RATE
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ThrottlingQuotaExceededError

# The first version of each API that knows THROTTLING_QUOTA_EXCEEDED.
_STRICT_SINCE = {19: 6, 37: 3, 20: 5}


def admit_mutation(ctx: RequestContext, header: RequestHeader, partitions: int) -> None:
    """Count `partitions` against the client's mutation quota, or raise
    ThrottlingQuotaExceededError (strict versions) while it is over."""
    quotas = getattr(ctx.broker, "quotas", None)
    if quotas is None or partitions <= 0:
        return
    client = header.client_id or ""
    strict = header.api_version >= _STRICT_SINCE.get(header.api_key, 1 << 15)
    if strict:
        waiting = quotas.throttle_s(ctx.principal, client, CONTROLLER_MUTATION_RATE, 0)
        if waiting > 0:
            raise ThrottlingQuotaExceededError(
                f"the controller mutation rate quota is exceeded; retry in {waiting:.1f} s")
    throttle = quotas.throttle_s(ctx.principal, client, CONTROLLER_MUTATION_RATE, partitions)
    if throttle > 0 and not strict:
        info = ctx.connection_info
        info["mute_until"] = max(info.get("mute_until", 0.0), trio.current_time() + throttle)
