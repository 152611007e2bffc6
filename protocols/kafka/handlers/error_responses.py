"""Exceptions become Kafka error codes and error responses here, and nowhere else.

Two kinds of failure reach the client:

* a failure of one topic or partition inside a request (unknown partition, offset out of range,
  a corrupt batch): the handler catches it around that one item and asks `error_code_of` for the
  wire code, so the rest of the request still succeeds;
* a failure of the whole request (an unsupported version, a bug in a handler): the broker asks
  `whole_request_error` for a response of the request's own API and version in which every
  topic/partition (or the top-level error field) carries the code, as Kafka's
  `AbstractRequest.getErrorResponse` does.

This module must never do I/O or decide *whether* something failed: it only translates.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from ledger_backend.faults import StorageFault, storage_fault_of, warn_fault
from protocols.kafka.errors import ErrorCode, KafkaProtocolError
from protocols.kafka.handlers.admin_errors import ADMIN_ERROR_BUILDERS
from protocols.kafka.schema import SCHEMAS

log = logging.getLogger("ledgerwire.kafka.handlers")

ZERO_UUID = uuid.UUID(int=0)


class ApiKey:
    """The API keys this broker knows by name (numbers from Kafka's ApiKeys enum)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47


def error_code_of(
    exc: BaseException, *, unavailable: ErrorCode = ErrorCode.KAFKA_STORAGE_ERROR
) -> ErrorCode:
    """The wire code for an exception raised while serving one item of a request.

    Protocol errors carry their code.  An expected storage fault (ledger_backend/faults.py) is
    answered with a code clients retry: NOT_LEADER_OR_FOLLOWER when the partition moved to
    another owner, else `unavailable` (Produce passes NOT_ENOUGH_REPLICAS: nothing of the
    request was appended; reads keep KAFKA_STORAGE_ERROR, which consumers retry after a
    metadata refresh), with one rate-limited WARNING line.  A read of an offloaded object that
    is missing or fails its checksums is answered CORRUPT_MESSAGE: librdkafka and the Java
    consumer hand it to the application (KAFKA_STORAGE_ERROR they would retry silently for
    ever, a hang to the user) and fetch again after their back-off, so the partition resumes
    once the object is restored.  Anything else is a bug or an
    unexpected backend failure: it is logged with its traceback and answered
    UNKNOWN_SERVER_ERROR, never allowed to kill the connection.
    """
    if isinstance(exc, KafkaProtocolError):
        return exc.code
    code = getattr(exc, "kafka_error_code", None)  # backend errors may name their own code
    if isinstance(code, int):
        try:
            return ErrorCode(code)
        except ValueError:
            pass
    fault = storage_fault_of(exc)
    if fault is not None:
        answer = ErrorCode.NOT_LEADER_OR_FOLLOWER if fault is StorageFault.MOVED else unavailable
        if fault is StorageFault.DAMAGED and unavailable is ErrorCode.KAFKA_STORAGE_ERROR:
            answer = ErrorCode.CORRUPT_MESSAGE  # clients retry KAFKA_STORAGE_ERROR silently
        warn_fault(log, f"{type(exc).__name__}:{answer.name}", "storage fault answered %s: %s",
                   answer.name, error_message_of(exc))  # fmt: skip
        return answer
    log.error("unexpected error while serving a request", exc_info=exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR


def error_message_of(exc: BaseException) -> str:
    if isinstance(exc, KafkaProtocolError) and exc.message:
        return exc.message
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# --- whole-request error responses, one builder per API ------------------------------------------


def _produce(version: int, body: dict, code: int, message: str | None) -> dict:
    return {
        "responses": [
            {
                "name": t.get("name"),
                "partition_responses": [
                    {
                        "index": p.get("index", 0),
                        "error_code": code,
                        "base_offset": -1,
                        "log_append_time_ms": -1,
                        "log_start_offset": -1,
                        "record_errors": [],
                        "error_message": message,
                    }
                    for p in t.get("partition_data") or []
                ],
            }
            for t in body.get("topic_data") or []
        ],
        "throttle_time_ms": 0,
    }


def _fetch(version: int, body: dict, code: int, message: str | None) -> dict:
    if version >= 7:
        return {"throttle_time_ms": 0, "error_code": code, "session_id": 0, "responses": []}
    return {
        "throttle_time_ms": 0,
        "responses": [
            {
                "topic": t.get("topic"),
                "topic_id": t.get("topic_id", ZERO_UUID),
                "partitions": [
                    {
                        "partition_index": p.get("partition", 0),
                        "error_code": code,
                        "high_watermark": -1,
                        "last_stable_offset": -1,
                        "log_start_offset": -1,
                        "aborted_transactions": None,
                        "records": None,
                    }
                    for p in t.get("partitions") or []
                ],
            }
            for t in body.get("topics") or []
        ],
    }


def _list_offsets(version: int, body: dict, code: int, message: str | None) -> dict:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t.get("name"),
                "partitions": [
                    {
                        "partition_index": p.get("partition_index", 0),
                        "error_code": code,
                        "old_style_offsets": [],
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                    }
                    for p in t.get("partitions") or []
                ],
            }
            for t in body.get("topics") or []
        ],
    }


def _metadata(version: int, body: dict, code: int, message: str | None) -> dict:
    return {
        "throttle_time_ms": 0,
        "brokers": [],
        "cluster_id": None,
        "controller_id": -1,
        "topics": [
            {
                "error_code": code,
                "name": t.get("name"),
                "topic_id": t.get("topic_id") or ZERO_UUID,
                "is_internal": False,
                "partitions": [],
            }
            for t in body.get("topics") or []
        ],
    }


def _find_coordinator(version: int, body: dict, code: int, message: str | None) -> dict:
    if version >= 4:
        return {
            "throttle_time_ms": 0,
            "coordinators": [
                {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code,
                 "error_message": message}
                for k in body.get("coordinator_keys") or []
            ],
        }
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "node_id": -1, "host": "", "port": -1}


def _api_versions(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"error_code": code, "api_keys": [], "throttle_time_ms": 0}


def _create_topics(version: int, body: dict, code: int, message: str | None) -> dict:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {"name": t.get("name"), "topic_id": ZERO_UUID, "error_code": code,
             "error_message": message, "num_partitions": -1, "replication_factor": -1,
             "configs": None}
            for t in body.get("topics") or []
        ],
    }


def _delete_topics(version: int, body: dict, code: int, message: str | None) -> dict:
    if version >= 6:
        items = [(t.get("name"), t.get("topic_id") or ZERO_UUID) for t in body.get("topics") or []]
    else:
        items = [(n, ZERO_UUID) for n in body.get("topic_names") or []]
    return {
        "throttle_time_ms": 0,
        "responses": [
            {"name": n, "topic_id": i, "error_code": code, "error_message": message}
            for n, i in items
        ],
    }


def _create_partitions(version: int, body: dict, code: int, message: str | None) -> dict:
    return {
        "throttle_time_ms": 0,
        "results": [
            {"name": t.get("name"), "error_code": code, "error_message": message}
            for t in body.get("topics") or []
        ],
    }


def _init_producer_id(version: int, body: dict, code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


def _describe_configs(version: int, body: dict, code: int, message: str | None) -> dict:
    return {
        "throttle_time_ms": 0,
        "results": [
            {"error_code": code, "error_message": message,
             "resource_type": r.get("resource_type", 0),
             "resource_name": r.get("resource_name", ""), "configs": []}
            for r in body.get("resources") or []
        ],
    }


def _offset_for_leader_epoch(version: int, body: dict, code: int, message: str | None) -> dict:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "topic": t.get("topic"),
                "partitions": [
                    {"error_code": code, "partition": p.get("partition", 0),
                     "leader_epoch": -1, "end_offset": -1}
                    for p in t.get("partitions") or []
                ],
            }
            for t in body.get("topics") or []
        ],
    }


_ErrorBuilder = Callable[[int, dict, int, "str | None"], dict]

_BUILDERS: dict[int, _ErrorBuilder] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.METADATA: _metadata,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.API_VERSIONS: _api_versions,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
}
_BUILDERS.update(ADMIN_ERROR_BUILDERS)


def whole_request_error(
    api_key: int, version: int, body: dict[str, Any], code: int, message: str | None = None
) -> dict | None:
    """A response body of `api_key`/`version` that answers every item of `body` with `code`.

    None when this broker has no builder for the API (the caller then closes the connection,
    which is also what Kafka does for requests it cannot answer).
    """
    builder = _BUILDERS.get(api_key)
    if builder is not None:
        return builder(version, body, int(code), message)
    if _has_top_level_error_code(api_key, version):
        # Responses with one top-level error field (JoinGroup, Heartbeat, SaslHandshake, ...):
        # every other field takes its spec default when encoded.
        return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message}
    return None


def _has_top_level_error_code(api_key: int, version: int) -> bool:
    schema = SCHEMAS.get(api_key)
    if schema is None or not schema.supports(version):
        return False
    return any(f.key == "error_code" and f.present_in(version) for f in schema.response)


def has_error_builder(api_key: int, version: int) -> bool:
    return api_key in _BUILDERS or _has_top_level_error_code(api_key, version)
