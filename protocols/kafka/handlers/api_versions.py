"""ApiVersions (key 18): the versions of every API this broker answers.

The list comes from the broker (`BrokerApi.supported_api_versions`), which derives it from the
dispatch table intersected with the codec's schema table, so the broker advertises exactly what
it implements.  An ApiVersions request of a version the codec does not know never reaches this
handler: the listener answers it with a v0 response carrying UNSUPPORTED_VERSION (Kafka's way,
so clients retry with a version from that list).

This module must never advertise an API that has no handler.
"""

from __future__ import annotations

from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode


def api_versions_body(ctx: RequestContext, error_code: int = ErrorCode.NONE) -> dict:
    ranges = ctx.broker.supported_api_versions()
    return {
        "error_code": int(error_code),
        "api_keys": [
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(ranges.items())
        ],
        "throttle_time_ms": 0,
        "supported_features": [],
        "finalized_features_epoch": -1,
        "finalized_features": [],
        "zk_migration_ready": False,
    }


async def handle_api_versions(ctx: RequestContext, header: RequestHeader, body: dict) -> dict:
    if header.api_version >= 3:
        ctx.connection_info["client_software_name"] = body.get("client_software_name")
        ctx.connection_info["client_software_version"] = body.get("client_software_version")
    return api_versions_body(ctx)
