"""The Kafka broker: identity, configuration and request dispatch for one listener.

`KafkaBroker` holds the topic service and the broker's identity (`KafkaBrokerConfig`), decodes a
request frame, runs its handler from `protocols.kafka.handlers.HANDLERS` and encodes the answer.
What it advertises in ApiVersions is computed once: every registered handler's version range
intersected with the codec's schema table, so clients never see a version nothing implements.

Errors: a handler reports per-partition failures itself; an exception escaping a handler (or a
version outside what the handler implements) becomes a whole-request error response through
`whole_request_error`.  A request this broker cannot answer at all raises `CloseConnection`, and
so does a failed acks=0 Produce (the only way Kafka tells such a producer something went wrong).

This module must never touch sockets: the listener (gateway/kafka/listener.py) owns them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import trio

from gateway.config.settings import RetentionConfig
from protocols.kafka.broker_api import RequestContext, TopicServiceApi
from protocols.kafka.client_quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE
from protocols.kafka.codec import (
    RequestHeader,
    decode_request,
    encode_response,
    encode_response_buffers,
)
from protocols.kafka.errors import ErrorCode, KafkaProtocolError, UnsupportedVersionError
from protocols.kafka.handlers import HANDLERS, ApiKey
from protocols.kafka.handlers.api_versions import api_versions_body
from protocols.kafka.handlers.error_responses import whole_request_error
from protocols.kafka.handlers.produce import produce_failed
from protocols.kafka.handlers.request_order import ConnectionOrder, RequestTurn
from protocols.kafka.schema import SCHEMAS

log = logging.getLogger("ledgerwire.kafka.broker")


class CloseConnection(Exception):
    """The connection that carried the request must be closed (no answer is possible)."""


@dataclass
class KafkaBrokerConfig:
    broker_id: int = 0
    advertised_host: str = "localhost"
    advertised_port: int = 9092  # 0: advertise the port the listener bound
    cluster_id: str = "ledgerwire"
    auto_create_topics: bool = True
    default_partitions: int = 1
    max_message_bytes: int = 1048588  # Kafka's message.max.bytes default
    retention_ms: int = RetentionConfig.retention_ms
    retention_bytes: int = RetentionConfig.retention_bytes
    rack: str | None = None
    log_dir: str | None = None  # what DescribeLogDirs names (a standalone's data directory)
    max_frame_bytes: int = 100 * 1024 * 1024  # socket.request.max.bytes
    max_in_flight_per_connection: int = 128
    # Before SASL authentication a frame may be at most this big (sasl.server.max.receive.size)
    max_pre_auth_frame_bytes: int = 512 * 1024
    failed_authentication_delay_s: float = 0.1  # connection.failed.authentication.delay.ms
    connections_max_reauth_ms: int = 0  # KIP-368: a SASL login's lifetime (0: forever)
    max_connections: int = 0  # max.connections (0: no limit)
    max_connections_per_ip: int = 0  # max.connections.per.ip (0: no limit)
    # A Fetch answer holds at most this much record data (fetch.max.bytes), and one
    # connection has at most `fetch_answers_per_connection` Fetch answers in memory (being
    # read or waiting to be written): its next Fetch is not read before one is written.
    fetch_max_bytes: int = 55 * 1024 * 1024
    fetch_answers_per_connection: int = 1
    max_partitions_per_request: int = 10_000  # created by one CreateTopics/CreatePartitions
    idle_timeout_s: float = 600.0  # connections.max.idle.ms
    write_timeout_s: float = 60.0  # a client that stops reading its answers is disconnected
    drain_timeout_s: float = 10.0  # graceful shutdown: time given to in-flight requests


def _advertised_ranges(with_groups: bool, with_transactions: bool = False,
                       with_share_groups: bool = False) -> dict[int, tuple[int, int]]:
    ranges: dict[int, tuple[int, int]] = {}
    for key, spec in HANDLERS.items():
        schema = SCHEMAS.get(key)
        if schema is None or (spec.needs_group_coordinator and not with_groups):
            continue
        if spec.needs_transaction_coordinator and not with_transactions:
            continue
        if spec.needs_share_groups and not with_share_groups:
            continue
        low = max(spec.min_version, schema.min_version)
        high = min(spec.max_version, schema.max_version)
        if low <= high:
            ranges[key] = (low, high)
    return ranges


class KafkaBroker:
    """One Kafka broker's request handling (see the module docstring)."""

    def __init__(self, topic_service: TopicServiceApi, config: KafkaBrokerConfig | None = None,
                 *, group_coordinator: Any = None, transaction_coordinator: Any = None,
                 authorizer: Any = None, credentials: Any = None, quotas: Any = None,
                 share_groups: Any = None) -> None:
        self.topic_service = topic_service
        self.config = config if config is not None else KafkaBrokerConfig()
        self._static_config = self.config
        # gateway.config.dynamic_brokers.DynamicBrokerConfigStore (Describe/AlterConfigs on
        # BROKER resources), or None: broker configs are static
        self.dynamic_configs: Any = None
        # protocols.kafka.group_coordinator.GroupCoordinator; group APIs are served only with one
        self.group_coordinator = group_coordinator
        self._advertised_port = self.config.advertised_port
        # protocols.kafka.transaction_coordinator.TransactionCoordinator; the transaction APIs
        # are served only with one
        self.transaction_coordinator = transaction_coordinator
        # gateway.security.acl_store.Authorizer (RequestContext.authorize asks it; None: allow
        # all, and the ACL APIs answer SECURITY_DISABLED) and
        # gateway.security.credentials.CredentialStore (SASL)
        self.authorizer = authorizer
        self.credentials = credentials
        # gateway.security.delegation_tokens.DelegationTokenStore (KIP-48; None: the token
        # APIs answer DELEGATION_TOKEN_AUTH_DISABLED and no login uses a token)
        self.delegation_tokens: Any = None
        # gateway.security.quota_store.QuotaStore (client quotas; None: no quotas)
        self.quotas = quotas
        # gateway.kafka.share_groups.ShareGroups; the share-group APIs are served only with it
        self.share_groups = share_groups
        self._versions = _advertised_ranges(group_coordinator is not None,
                                            transaction_coordinator is not None,
                                            share_groups is not None)
        # gateway.admin.metrics.BrokerMetrics.observe_request(api name, seconds, body, response)
        self.request_observer: Callable[[str, float, dict, dict | None], None] | None = None

    def apply_dynamic_configs(self, effective: Mapping[str, str]) -> None:
        """Dynamic broker configs (broker name -> value) over the static ones, at once."""
        static = self._static_config
        self.config = replace(
            static,
            max_message_bytes=int(effective.get("message.max.bytes",
                                                static.max_message_bytes)),
            retention_ms=int(effective.get("log.retention.ms", static.retention_ms)),
            retention_bytes=int(effective.get("log.retention.bytes", static.retention_bytes)))

    # --- identity -------------------------------------------------------------------------------

    @property
    def advertised_host(self) -> str:
        return self.config.advertised_host

    @property
    def advertised_port(self) -> int:
        return self._advertised_port

    def listener_bound(self, port: int) -> None:
        """Called by the listener with its bound port; used when the configured port is 0."""
        if self.config.advertised_port == 0:
            self._advertised_port = port

    def supported_api_versions(self) -> Mapping[int, tuple[int, int]]:
        return self._versions

    def new_context(self, client_address: str) -> RequestContext:
        """The context of one connection."""
        return RequestContext(broker=self, client_address=client_address,
                              order=ConnectionOrder())

    def request_context(self, connection: RequestContext, header: RequestHeader) -> RequestContext:
        """The context of one request; call synchronously in the order requests were read."""
        if connection.order is None:
            return connection
        turn = connection.order.admit(header.api_key)
        fields = getattr(connection, "__dict__", None)
        if fields is None or type(connection) is not RequestContext:
            return replace(connection, turn=turn)
        # A shallow copy, as dataclasses.replace makes, without its per-field overhead.
        request = object.__new__(RequestContext)
        request.__dict__.update(fields)
        request.turn = turn
        return request

    # --- requests -------------------------------------------------------------------------------

    def decode(self, frame: bytes) -> tuple[RequestHeader, dict]:
        """Decode one frame (MalformedRequestError / UnsupportedVersionError as the codec says)."""
        return decode_request(frame)

    def answer_unsupported_version(self, exc: UnsupportedVersionError) -> bytes:
        """The answer to a request whose version the codec does not know, else CloseConnection.

        ApiVersions is answered Kafka's way: a v0 response with UNSUPPORTED_VERSION and the
        supported list, so the client retries with a version it finds there.  Other APIs cannot be
        answered in a layout the client expects; Kafka closes the connection, and so do we.
        """
        header = exc.header
        if header is None or header.api_key != ApiKey.API_VERSIONS:
            raise CloseConnection(f"unsupported request version: {exc}")
        v0 = RequestHeader(api_key=ApiKey.API_VERSIONS, api_version=0,
                           correlation_id=header.correlation_id, client_id=header.client_id)
        ctx = self.new_context("?")
        return encode_response(v0, api_versions_body(ctx, ErrorCode.UNSUPPORTED_VERSION))

    async def handle(self, ctx: RequestContext, header: RequestHeader, body: dict) -> bytes | None:
        """Run the request's handler; the encoded response frame, or None for acks=0 Produce."""
        buffers = await self.handle_to_buffers(ctx, header, body)
        return None if buffers is None else b"".join(buffers)

    async def handle_to_buffers(self, ctx: RequestContext, header: RequestHeader,
                                body: dict) -> list[Any] | None:
        """`handle`, with the frame as buffers for a vectored send (stored batches uncopied)."""
        key, version = header.api_key, header.api_version
        turn: RequestTurn | None = ctx.turn
        try:
            if turn is not None:
                await turn.wait_until_ready()
            started = time.perf_counter()
            response = await self._dispatch(ctx, header, body)
            if self.request_observer is not None:
                spec = HANDLERS.get(key)
                self.request_observer(spec.name if spec else str(key),
                                      time.perf_counter() - started, body, response)
        finally:
            if turn is not None:
                turn.finished()
        if self.quotas is not None and response is not None and key in _METERED:
            self._throttle(ctx, header, body, response)
        if key == ApiKey.PRODUCE and body.get("acks") == 0:
            if response is None or produce_failed(response):
                raise CloseConnection("acks=0 produce failed")
            return None
        if response is None:
            raise CloseConnection(f"no answer for api key {key} version {version}")
        try:
            return encode_response_buffers(header, response)
        except Exception:  # a handler produced a body the schema rejects: a bug, answer it
            log.exception("response does not encode", extra={"api_key": key, "version": version,
                                                             "client": ctx.client_address})
            fallback = whole_request_error(key, version, body, ErrorCode.UNKNOWN_SERVER_ERROR)
            if fallback is None:
                raise CloseConnection("response could not be encoded") from None
            return [encode_response(header, fallback)]

    def _throttle(self, ctx: RequestContext, header: RequestHeader, body: dict,
                  response: dict) -> None:
        """Client quotas (Kafka's, KIP-219): meter the request's bytes; over the quota, the
        answer says throttle_time_ms and the connection is not read for that long."""
        if header.api_key == ApiKey.PRODUCE:
            key, amount = PRODUCER_BYTE_RATE, sum(
                len(p.get("records") or b"") for t in body.get("topic_data") or []
                for p in t.get("partition_data") or [])
        else:
            key, amount = CONSUMER_BYTE_RATE, sum(
                _size(p.get("records")) for t in response.get("responses") or []
                for p in t.get("partitions") or [])
        seconds = self.quotas.throttle_s(ctx.principal, header.client_id or "", key, amount)
        if seconds > 0:
            response["throttle_time_ms"] = max(int(response.get("throttle_time_ms") or 0),
                                               int(seconds * 1000))
            mute_until = trio.current_time() + seconds
            info = ctx.connection_info
            info["mute_until"] = max(info.get("mute_until", 0.0), mute_until)

    async def _dispatch(self, ctx: RequestContext, header: RequestHeader,
                        body: dict) -> dict | None:
        key, version = header.api_key, header.api_version
        spec = HANDLERS.get(key)
        supported = self._versions.get(key)
        if spec is None or supported is None or not supported[0] <= version <= supported[1]:
            if key == ApiKey.API_VERSIONS:
                return api_versions_body(ctx, ErrorCode.UNSUPPORTED_VERSION)
            return whole_request_error(key, version, body, ErrorCode.UNSUPPORTED_VERSION,
                                       f"version {version} of api key {key} is not supported")
        try:
            return await spec.handle(ctx, header, body)
        except KafkaProtocolError as exc:
            return whole_request_error(key, version, body, exc.code, exc.message)
        except Exception:  # a handler bug must not kill the connection or the broker
            log.exception("handler failed", extra={"api": spec.name, "version": version,
                                                   "client": ctx.client_address})
            return whole_request_error(key, version, body, ErrorCode.UNKNOWN_SERVER_ERROR)


_METERED = frozenset({ApiKey.PRODUCE, ApiKey.FETCH})


def _size(records: Any) -> int:
    """Bytes of a Fetch answer's records (bytes, or a list of stored batches)."""
    if records is None:
        return 0
    if isinstance(records, bytes | bytearray | memoryview):
        return len(records)
    return sum(len(r) for r in records)


def describe(broker: KafkaBroker) -> dict[str, Any]:
    """A summary for logs and the admin endpoint."""
    return {"broker_id": broker.config.broker_id,
            "advertised": f"{broker.advertised_host}:{broker.advertised_port}",
            "apis": {HANDLERS[k].name: v for k, v in broker.supported_api_versions().items()}}
