"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): SCRAM users managed
the Kafka way (`kafka-configs.sh --alter --entity-type users --add-config SCRAM-SHA-256=...`,
AdminClient.describeUserScramCredentials / alterUserScramCredentials).

The credentials are the broker's credential store (`broker.credentials`, the same one
`ledgerwire users` and SASL logins use): Describe answers each user's mechanisms and
iteration counts (never salts or keys); Alter stores what the client computed — salt and
SaltedPassword, from which the StoredKey/ServerKey pair is derived — or deletes a mechanism.
Kafka's rules: DESCRIBE on the cluster to describe (else a top-level
CLUSTER_AUTHORIZATION_FAILED), ALTER on the cluster to alter (else that per user); a user named
twice in one request is DUPLICATE_RESOURCE; describing a user without credentials, or deleting
a credential that does not exist, is RESOURCE_NOT_FOUND; an unknown mechanism is
UNSUPPORTED_SASL_MECHANISM; an empty name, empty salt or password, or iterations outside
4096..16384 is UNACCEPTABLE_CREDENTIAL.  Each user's changes are one compare-and-set.

This module must never log or answer a salt, key or password.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

from protocols.kafka.acl_model import CLUSTER_NAME, OP_ALTER, OP_DESCRIBE, RES_CLUSTER
from protocols.kafka.broker_api import RequestContext
from protocols.kafka.codec import RequestHeader
from protocols.kafka.errors import ErrorCode
from protocols.kafka.handlers.error_responses import error_code_of, error_message_of
from protocols.kafka.sasl import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    credential_from_salted,
)

MECHANISM_CODES = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}  # Kafka's ScramMechanism types
CODE_OF_MECHANISM = {name: code for code, name in MECHANISM_CODES.items()}


class CredentialStoreApi(Protocol):
    """gateway.security.credentials.CredentialStore, as these handlers use it."""

    async def list_users(self) -> dict[str, list[str]]: ...

    async def mechanisms_of(self, user: str) -> dict[str, int] | None: ...

    async def alter(self, user: str, change: dict[str, ScramCredential | None]) -> None: ...


def _store(ctx: RequestContext) -> CredentialStoreApi | None:
    return getattr(ctx.broker, "credentials", None)


def _result(user: str, code: int, message: str | None = None) -> dict[str, Any]:
    return {"user": user, "error_code": int(code), "error_message": message}


async def handle_describe_user_scram_credentials(ctx: RequestContext, header: RequestHeader,
                                                 body: dict) -> dict:
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                              "results": []}
    store = _store(ctx)
    if not ctx.authorize(OP_DESCRIBE, RES_CLUSTER, CLUSTER_NAME):
        answer.update(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                      error_message="not authorized to describe SCRAM credentials")
        return answer
    if store is None:
        return answer  # no credential store: no SCRAM users
    requested = [str(u.get("name", "")) for u in body.get("users") or []]
    try:
        if not requested:
            users = await store.list_users()
            names = sorted(users)
        else:
            names = requested
        counts = Counter(names)
        for user in dict.fromkeys(names):
            if counts[user] > 1:
                answer["results"].append({**_result(user, ErrorCode.DUPLICATE_RESOURCE,
                                                    "user named more than once"),
                                          "credential_infos": []})
                continue
            infos = await store.mechanisms_of(user)
            if not infos:
                answer["results"].append({**_result(user, ErrorCode.RESOURCE_NOT_FOUND,
                                                    "attempt to describe nonexistent user"),
                                          "credential_infos": []})
                continue
            answer["results"].append({**_result(user, ErrorCode.NONE), "credential_infos": [
                {"mechanism": CODE_OF_MECHANISM[m], "iterations": n}
                for m, n in sorted(infos.items()) if m in CODE_OF_MECHANISM]})
    except Exception as exc:  # noqa: BLE001 - the store failed: the whole answer says so
        answer.update(error_code=int(error_code_of(exc)), error_message=error_message_of(exc),
                      results=[])
    return answer


def _changes_of_user(items: list[tuple[str, dict]]) -> tuple[dict, int, str | None]:
    """(mechanism -> credential or None, error code, message) for one user's alterations."""
    change: dict[str, ScramCredential | None] = {}
    for kind, item in items:
        mechanism = MECHANISM_CODES.get(int(item.get("mechanism", 0)))
        if mechanism is None:
            return {}, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "unknown SCRAM mechanism"
        if mechanism in change:
            return {}, ErrorCode.DUPLICATE_RESOURCE, f"{mechanism} altered twice"
        if kind == "delete":
            change[mechanism] = None
            continue
        try:
            change[mechanism] = credential_from_salted(
                mechanism, bytes(item.get("salt") or b""),
                bytes(item.get("salted_password") or b""), int(item.get("iterations", 0)))
        except ValueError as exc:
            return {}, ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc)
    return change, ErrorCode.NONE, None


async def handle_alter_user_scram_credentials(ctx: RequestContext, header: RequestHeader,
                                              body: dict) -> dict:
    per_user: dict[str, list[tuple[str, dict]]] = {}
    for item in body.get("deletions") or []:
        per_user.setdefault(str(item.get("name", "")), []).append(("delete", item))
    for item in body.get("upsertions") or []:
        per_user.setdefault(str(item.get("name", "")), []).append(("upsert", item))
    store = _store(ctx)
    allowed = ctx.authorize(OP_ALTER, RES_CLUSTER, CLUSTER_NAME)
    results = []
    for user, items in per_user.items():
        if not allowed:
            results.append(_result(user, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                   "not authorized to alter SCRAM credentials"))
            continue
        if not user:
            results.append(_result(user, ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                   "username must not be empty"))
            continue
        if store is None:
            results.append(_result(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                   "this broker keeps no SCRAM credentials"))
            continue
        change, code, message = _changes_of_user(items)
        if code:
            results.append(_result(user, code, message))
            continue
        try:
            existing = await store.mechanisms_of(user) or {}
            missing = [m for m, c in change.items() if c is None and m not in existing]
            if missing:
                results.append(_result(user, ErrorCode.RESOURCE_NOT_FOUND,
                                       f"attempt to delete a nonexistent {missing[0]} credential"))
                continue
            await store.alter(user, change)
            results.append(_result(user, ErrorCode.NONE))
        except Exception as exc:  # noqa: BLE001 - this user's error code
            results.append(_result(user, error_code_of(exc), error_message_of(exc)))
    return {"throttle_time_ms": 0, "results": results}
